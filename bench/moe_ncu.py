"""Nsight Compute over one MoE decode step (issue 38, item 2): DRAM bytes against the analytic
touched-expert bytes, and where the step's time goes, kernel by kernel.

    python -m bench.moe_ncu OUT_DIR [--models olmoe_1b_7b,qwen3_30b_a3b] [--batches 1,8]

For each preset and batch a child process builds the design (random bf16 weights, the router as
built, ``kernels=triton``), prefills a 512-token prompt, runs two decode steps eagerly, then one
more between ``cudaProfilerStart/Stop`` under ``ncu`` (``sweep.measure.ncu.command``: the
``memory`` set, kernel time and DRAM bytes, caches flushed before each kernel, clocks left as
they are). A forward hook on every MoE layer's router keeps that step's logits, so the experts
the step touched are counted, not expected: ``touched`` (summed over the layers).

Figures per (design, batch), in ``OUT_DIR/moe_ncu.json`` and ``moe_ncu.md``:
``expert_dram_bytes`` (DRAM bytes read by the grouped GEMMs, kernels ``_moe_up`` / ``_moe_down``)
against ``expert_bytes`` = touched x (3 d_model expert_ffn_dim) x 2 bytes, the weights of the
experts the step touched; ``step_dram_bytes`` (every kernel of the step, read + written) against
``zoo.counts.decode_step``'s minimum bytes (experts expected under uniform routing); the step's
kernels grouped by name with their summed ncu time (us, each kernel cold and serialised: not the
step's wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

PROMPT = 512


def child(name: str, batch: int, out: Path) -> None:
    """Run the profiled step (under ncu) and write the touched experts to ``out``."""
    import torch

    from zoo import Generator, ModelConfig, Transformer

    cfg = ModelConfig.from_name(name).resolved("cuda")
    model = Transformer.build(cfg, "cuda", seed=0)
    gen = Generator(model, batch, PROMPT + 16, "eager")
    toks = torch.randint(0, cfg.vocab_size, (batch, PROMPT), device="cuda")
    tok = gen.prefill(toks).argmax(-1, keepdim=True)
    for _ in range(2):
        tok = gen.decode(tok).argmax(-1, keepdim=True)
    logits = []
    hooks = [m.router.register_forward_hook(lambda mod, i, o: logits.append(o.detach().clone()))
             for m in model.modules() if hasattr(m, "router") and hasattr(m, "w13")]
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    gen.decode(tok)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    for h in hooks:
        h.remove()
    touched = [int(torch.topk(lg.float(), cfg.n_experts_active, -1).indices.unique().numel())
               for lg in logits]
    out.write_text(json.dumps({"touched_per_layer": touched}))


def profile(name: str, batch: int, out_dir: Path) -> dict:
    """One (design, batch): ncu over the child's step, summed (module doc)."""
    from sweep.measure import ncu
    from zoo import ModelConfig, counts

    cfg = ModelConfig.from_name(name)
    tag = f"{name}_b{batch}"
    log, touched_f = out_dir / f"{tag}.ncu.csv", out_dir / f"{tag}.touched.json"
    cmd = ncu.command(log, "memory") + [sys.executable, "-m", "bench.moe_ncu", "--child", name,
                                        str(batch), str(touched_f)]
    rc = subprocess.run(cmd, env=os.environ.copy(), timeout=600).returncode
    if rc or not touched_f.exists():
        return {"model": name, "batch": batch, "error": f"ncu child rc={rc}"}
    rows = ncu.parse_csv(log.read_text())
    touched = json.loads(touched_f.read_text())["touched_per_layer"]
    per_expert = 3 * cfg.d_model * cfg.expert_ffn_dim * 2
    expert_read = sum(r["dram_read"] for r in rows if "_moe_up" in r["kernel"]
                      or "_moe_down" in r["kernel"])
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        g = by_name[r["kernel"][:60]]
        g[0] += 1
        g[1] += r["time_ns"] / 1e3
        g[2] += r["dram_read"] + r["dram_write"]
    step = counts.decode_step(cfg, batch, PROMPT + 2)
    return {"model": name, "batch": batch, "kernels": len(rows), "touched": sum(touched),
            "touched_per_layer_mean": sum(touched) / len(touched),
            "expert_bytes": sum(touched) * per_expert, "expert_dram_bytes": expert_read,
            "expert_ratio": expert_read / (sum(touched) * per_expert),
            "step_dram_bytes": sum(r["dram_read"] + r["dram_write"] for r in rows),
            "step_min_bytes": step.min_bytes,
            "kernel_time_us": sum(r["time_ns"] for r in rows) / 1e3,
            "by_kernel": sorted(([k, *v] for k, v in by_name.items()), key=lambda x: -x[2])}


def _md(rows: list[dict]) -> str:
    out = ["| design | batch | touched | expert bytes (MB) | ncu expert DRAM (MB) | ratio | "
           "step DRAM (MB) | analytic step (MB) | kernels | ncu time (us) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['batch']} | {r['error']} |")
            continue
        out.append(f"| {r['model']} | {r['batch']} | {r['touched']} | {r['expert_bytes']/1e6:.1f} "
                   f"| {r['expert_dram_bytes']/1e6:.1f} | {r['expert_ratio']:.3f} | "
                   f"{r['step_dram_bytes']/1e6:.1f} | {r['step_min_bytes']/1e6:.1f} | "
                   f"{r['kernels']} | {r['kernel_time_us']:.0f} |")
    for r in rows:
        if "error" in r:
            continue
        out += ["", f"### {r['model']} batch {r['batch']}: kernels by name", "",
                "| kernel | count | ncu us | DRAM MB |", "|---|---:|---:|---:|"]
        out += [f"| `{k}` | {n} | {t:.1f} | {b/1e6:.1f} |" for k, n, t, b in r["by_kernel"]]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--models", default="olmoe_1b_7b,qwen3_30b_a3b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "BATCH", "OUT"))
    a = ap.parse_args(argv)
    if a.child:
        child(a.child[0], int(a.child[1]), Path(a.child[2]))
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    rows = [profile(m, int(b), a.out) for m in a.models.split(",") for b in a.batches.split(",")]
    (a.out / "moe_ncu.json").write_text(json.dumps(rows, indent=1))
    (a.out / "moe_ncu.md").write_text(_md(rows))
    print(_md(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
