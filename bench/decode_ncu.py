"""Nsight Compute over one decode step of a dense design, kernel by kernel (issue 34's levers):
where a step that reads its bytes at 0.72 of the copy bandwidth loses the rest.

    python -m bench.decode_ncu OUT_DIR [--designs g32_b8_4k,g16_b8_4k,1b_b1_512]
    python -m bench.decode_ncu OUT_DIR --designs kv_bf16,kv_int8,kv_fp8 --kernel _split_kernel
        # the kv group's b64 x 8k step, its decode attention's first launches only

For each design a child process builds it (random bf16 weights, ``kernels=triton``), prefills
its prompt, runs two decode steps eagerly (tiles chosen), then one more between
``cudaProfilerStart/Stop`` under ``ncu`` (``sweep.measure.ncu.command``, the ``detail`` set:
time, DRAM bytes, L2 hit, occupancy, stalls per issue; caches flushed before each kernel, clocks
left as they are). Each kernel is profiled alone, serialised and cold: its ncu time is not its
share of the graphed step (PDL overlaps their edges there), but its DRAM rate and stalls are its
own.

Per design, in ``OUT_DIR/decode_ncu.json`` and ``decode_ncu.md``: each kernel of the step's
second layer with its role (by position in the layer), time, DRAM bytes and rate (GB/s) against
the step's copy rate, grid size, occupancy and its top stalls; the step's totals.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

DESIGNS = {  # name: (preset, overrides, batch, prompt)
    "g32_b8_4k": ("llama3_2_1b", {"n_kv_heads": 1}, 8, 4096),
    "g16_b8_4k": ("llama3_2_1b", {"n_kv_heads": 2}, 8, 4096),
    "g4_b8_4k": ("llama3_2_1b", {"n_kv_heads": 8}, 8, 4096),
    "1b_b1_512": ("llama3_2_1b", {}, 1, 512),
    # sweep.bench's kv group: batch 64 x 8k, the cache in each format (issue 34, item 4)
    "kv_bf16": ("llama3_2_1b", {}, 64, 8192),
    "kv_int8": ("llama3_2_1b", {"kv_dtype": "int8"}, 64, 8192),
    "kv_fp8": ("llama3_2_1b", {"kv_dtype": "fp8_e4m3"}, 64, 8192),
}
EXTRA = ("launch__grid_size", "launch__registers_per_thread", "launch__block_size",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed",
         "launch__shared_mem_per_block_dynamic", "launch__occupancy_limit_shared_mem",
         "launch__occupancy_limit_registers", "launch__waves_per_multiprocessor")


def child(name: str) -> None:
    """Build the design, warm it up, and run the profiled step."""
    import torch

    from zoo import Generator, ModelConfig, Transformer

    preset, over, batch, prompt = DESIGNS[name]
    cfg = ModelConfig.from_name(preset, **over).resolved("cuda")
    model = Transformer.build(cfg, "cuda", seed=0)
    gen = Generator(model, batch, prompt + 16, "eager")
    toks = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
    tok = gen.prefill(toks).argmax(-1, keepdim=True)
    for _ in range(2):
        tok = gen.decode_greedy(tok)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    gen.decode_greedy(tok)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def profile(name: str, out_dir: Path, kernel: str | None = None) -> dict:
    """One design: ncu over the child's step (module doc); with ``kernel`` (a regex) only the
    first four launches of the kernels it names."""
    from sweep.measure import ncu

    log = out_dir / f"{name}.ncu.csv"
    cmd = ncu.command(log, "detail", extra=EXTRA) + [sys.executable, "-m", "bench.decode_ncu",
                                                     "--child", name]
    if kernel:
        cmd[1:1] = ["--kernel-name", f"regex:{kernel}", "--launch-count", "4"]
    rc = subprocess.run(cmd, env=os.environ.copy(), timeout=400).returncode
    try:
        rows = ncu.parse_csv(log.read_text(), extra=EXTRA)
    except (OSError, ValueError) as e:
        return {"design": name, "error": f"ncu rc={rc}: {str(e)[:300]}"}
    stalls = [k for k in rows[0] if k.startswith("stall_")] if rows else []
    out = []
    for r in rows:
        s = sorted(((r[k], k[6:]) for k in stalls if r[k] == r[k]), reverse=True)[:3]
        dram = r["dram_read"] + r["dram_write"]
        out.append({"id": r["id"], "kernel": r["kernel"][:48], "us": r["time_ns"] / 1e3,
                    "dram_MB": dram / 1e6, "GBps": dram / r["time_ns"] if r["time_ns"] else 0,
                    "grid": r.get("launch__grid_size"), "block": r.get("launch__block_size"),
                    "regs": r.get("launch__registers_per_thread"),
                    "dram_pct": r.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                    "occupancy_pct": r["occupancy_pct"], "l2_hit_pct": r["l2_hit_pct"],
                    **{k.removeprefix("launch__"): r.get(k) for k in EXTRA[4:]},
                    "top_stalls": ", ".join(f"{n} {v:.1f}" for v, n in s)})
    return {"design": name, "kernels": len(out),
            "step_us": sum(k["us"] for k in out), "step_dram_MB": sum(k["dram_MB"] for k in out),
            "rows": out}


def _md(res: list[dict]) -> str:
    lines = []
    for r in res:
        if "error" in r:
            lines += [f"## {r['design']}: {r['error']}", ""]
            continue
        lines += [f"## {r['design']}: {r['kernels']} kernels, {r['step_us']:.0f} us summed "
                  f"(each cold, serialised), {r['step_dram_MB']:.0f} MB", "",
                  "| # | kernel | us | DRAM MB | GB/s | DRAM % | grid | block | regs | smem KB | "
                  "blocks/SM by smem, regs | waves | occ. % | L2 hit % | top stalls (per issue) |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"]
        # the embedding and the first two layers, then the last layer's w2, the LM head, argmax
        for k in r["rows"] if len(r["rows"]) <= 17 else r["rows"][:14] + r["rows"][-3:]:
            lines.append(f"| {k['id']} | `{k['kernel']}` | {k['us']:.2f} | {k['dram_MB']:.2f} | "
                         f"{k['GBps']:.0f} | {k['dram_pct']:.0f} | {k['grid']:.0f} | "
                         f"{k['block']:.0f} | {k['regs']:.0f} | "
                         f"{k.get('shared_mem_per_block_dynamic', float('nan')) / 1024:.1f} | "
                         f"{k.get('occupancy_limit_shared_mem')}, "
                         f"{k.get('occupancy_limit_registers')} | "
                         f"{k.get('waves_per_multiprocessor', float('nan')):.2f} | "
                         f"{k['occupancy_pct']:.0f} | "
                         f"{k['l2_hit_pct']:.0f} | {k['top_stalls']} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--designs", default="g32_b8_4k,g16_b8_4k,1b_b1_512")
    ap.add_argument("--child")
    ap.add_argument("--kernel", help="profile only the first launches of kernels this regex names")
    a = ap.parse_args(argv)
    if a.child:
        child(a.child)
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    res = []
    for d in a.designs.split(","):
        res.append(profile(d, a.out, a.kernel))
        (a.out / "decode_ncu.json").write_text(json.dumps(res, indent=1))
        (a.out / "decode_ncu.md").write_text(_md(res))
    print(_md(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
