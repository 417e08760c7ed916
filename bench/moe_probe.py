"""Mixture-of-experts decode on the GPU (issue 38): the zoo's MoE designs measured against the
touched-bytes roofline, and one MoE layer against its peers.

    python -m bench.moe_probe OUT_DIR [--models olmoe_1b_7b,qwen3_30b_a3b] [--batches 1,8,64]
    python -m bench.moe_probe OUT_DIR --tiles      # the grouped GEMMs' decode tiles, swept

``model``: each shipped MoE preset (random bf16 weights, the router as built: near-uniform
routing) through ``zoo.Generator`` in ``cudagraph`` mode (the Triton path: ``kernels.moe_gemm``), a
512-token prompt then 64 decode steps, TPOT the median of 5 timed runs (CUDA events, after a
warm-up run); ``roofline_ms``: ``zoo.counts.decode_step``'s minimum bytes (the experts the batch's
tokens touch, expected under uniform routing) over the copy bandwidth measured here
(``sweep.measure.ceilings``: a 1 GiB ``copy_``); ``frac_roofline`` = roofline / measured.

``layer``: one MoE layer of the model's shape at each batch, its time per call replayed in a CUDA
graph (``kernels.graph_timing.time_ms``, cold: each call after a read of 2.5x the L2):
``zoo_triton`` (router, top-k, ``kernels.moe_gemm``), ``loop_graph`` (a plain PyTorch layer a CUDA
graph can capture: every expert applied to every token, masked by its routing weight: reads all
experts), ``transformers_eager`` (transformers' own sparse MoE block, eagerly: it reads its hit
experts on the host, so no graph captures it; the weights the zoo layer's). ``touched`` is the
number of distinct experts the call's tokens route to, ``touched_bytes_us`` their weights over the
copy bandwidth.

Output: ``OUT_DIR/moe_probe.json`` and ``moe_probe.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch


def _env() -> dict:
    import triton

    from sweep.common.env import environment

    name = torch.cuda.get_device_name()
    return {**environment({"type": "cuda", "name": name}), "torch": torch.__version__,
            "triton": triton.__version__}


def _predicted(cfg, batch, prompt, steps) -> tuple[float, str]:
    """The performance model's TPOT (ms) of the design from the calibration shipped for this GPU
    as it is (``sweep.analysis.predict``), and its notes: an entry the shipped file lacks is not
    measured here, as a study would on first use, but priced from the entries beside it (the
    notes say which)."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from sweep.analysis.hardware import load_spec

    have = store.shipped(torch.cuda.get_device_name())
    spec = load_spec("auto", torch.cuda.get_device_name())
    row = perf.predict(cfg, {"batch": batch, "prompt_len": prompt, "new_tokens": steps}, spec,
                       pricing.Calibrated(have) if have else None, mode="cudagraph")
    return float(row["decode_pred_ms"]), row.get("prediction_notes", "")


def model_rows(names, batches, copy_bw, prompt=512, steps=64) -> list[dict]:
    """TPOT of each MoE preset at each batch (module doc)."""
    from zoo import Generator, ModelConfig, Transformer, counts

    from .tpot import tpot_runs

    rows = []
    for name in names:
        cfg = ModelConfig.from_name(name).resolved("cuda")
        model = Transformer.build(cfg, "cuda", seed=0)
        for b in batches:
            gen = Generator(model, b, prompt + steps + 8, "cudagraph")
            toks = torch.randint(0, cfg.vocab_size, (b, prompt), device="cuda")
            times = tpot_runs(gen, toks, steps, 6)
            tpot = statistics.median(times)
            st = counts.decode_step(cfg, b, prompt + steps // 2)
            roof = st.min_bytes / copy_bw * 1e3
            pred, notes = _predicted(cfg, b, prompt, steps)
            rows.append({"model": name, "batch": b, "tpot_ms": tpot, "tpot_ms_min": min(times),
                         "tpot_ms_max": max(times), "decode_tok_s": b / tpot * 1e3,
                         "min_bytes": st.min_bytes, "roofline_ms": roof,
                         "frac_roofline": roof / tpot, "params_active": counts.params(cfg).active,
                         "pred_ms": pred, "pred_error_pct": 100 * (pred / tpot - 1),
                         "pred_notes": notes})
            print(json.dumps(rows[-1]), flush=True)
            del gen
        del model
        torch.cuda.empty_cache()
    return rows


def _loop_graph_layer(w13, w2, router, k):
    """A plain PyTorch MoE layer a CUDA graph captures: every expert on every token, weighted by
    its routing weight (zero where not chosen)."""
    def layer(h):
        probs = torch.softmax(router(h).float(), -1)
        w, idx = torch.topk(probs, k, -1)
        dense = torch.zeros_like(probs).scatter_(1, idx, w).to(h.dtype)
        out = torch.zeros_like(h)
        for e in range(w13.shape[0]):
            g, u = torch.nn.functional.linear(h, w13[e]).chunk(2, -1)
            out += torch.nn.functional.linear(torch.nn.functional.silu(g) * u, w2[e]) * \
                dense[:, e, None]
        return out
    return layer


def layer_rows(names, batches, copy_bw) -> list[dict]:
    """One MoE layer per model shape and batch against its peers (module doc)."""
    import transformers

    from kernels.graph_timing import time_ms
    from zoo import ModelConfig
    from zoo.experts import MoEFeedForward

    rows = []
    for name in names:
        cfg = ModelConfig.from_name(name).resolved("cuda")
        layer = MoEFeedForward(cfg).to("cuda", torch.bfloat16)
        with torch.no_grad():
            for p in layer.parameters():
                p.normal_(0.0, 0.02)
        hf_cfg = transformers.AutoConfig.for_model(**cfg.to_hf())
        hf_block = {"mixtral": transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock,
                    "qwen3_moe": transformers.models.qwen3_moe.modeling_qwen3_moe
                    .Qwen3MoeSparseMoeBlock,
                    "olmoe": transformers.models.olmoe.modeling_olmoe.OlmoeSparseMoeBlock}[
            hf_cfg.model_type](hf_cfg).to("cuda", torch.bfloat16).eval()
        with torch.no_grad():
            hf_block.gate.weight.copy_(layer.router.weight)
            ex = hf_block.experts
            if hasattr(ex, "gate_up_proj"):  # transformers 5: the experts stacked
                ex.gate_up_proj.copy_(layer.w13)
                ex.down_proj.copy_(layer.w2)
            else:  # transformers 4: one module per expert (Mixtral's w1 / w3 / w2)
                F = cfg.expert_ffn_dim
                for e, m in enumerate(ex):
                    g, u, dn = ((m.w1, m.w3, m.w2) if hasattr(m, "w1")
                                else (m.gate_proj, m.up_proj, m.down_proj))
                    g.weight.copy_(layer.w13[e, :F])
                    u.weight.copy_(layer.w13[e, F:])
                    dn.weight.copy_(layer.w2[e])
        per_expert = 3 * cfg.d_model * cfg.expert_ffn_dim * 2
        loop = _loop_graph_layer(layer.w13, layer.w2, layer.router, cfg.n_experts_active)
        for b in batches:
            x = torch.randn(b, 1, cfg.d_model, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                _, idx = layer.route(x.view(b, -1))
                touched = int(idx.unique().numel())
                ref = hf_block(x).float()
                got = layer(x).float()
                err = float((got - ref).norm() / ref.norm())
                t_zoo = time_ms(lambda f=layer, x=x: f(x))
                flat = x.view(b, -1)
                t_loop = time_ms(lambda f=loop, h=flat: f(h))
                torch.cuda.synchronize()
                ts = []
                for _ in range(20):
                    a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    hf_block(x)
                    z.record()
                    z.synchronize()
                    ts.append(a.elapsed_time(z))
            rows.append({"model": name, "batch": b, "touched": touched,
                         "touched_bytes_us": touched * per_expert / copy_bw * 1e6,
                         "zoo_triton_us": t_zoo * 1e3, "loop_graph_us": t_loop * 1e3,
                         "transformers_eager_us": statistics.median(ts[5:]) * 1e3,
                         "rel_err_vs_transformers": err})
            print(json.dumps(rows[-1]), flush=True)
        del layer, hf_block
        torch.cuda.empty_cache()
    return rows


SWEEP = [(16, bn, bk, w, st) for bn in (32, 64, 128) for bk in (64, 128, 256) for w in (4, 8)
         for st in (2, 3, 4) if bn * bk <= 16384]


def tile_rows(names, batches, copy_bw) -> list[dict]:
    """The grouped GEMMs' time per call (``kernels.moe_gemm.moe_experts``, routing fixed) at each
    decode tile of ``SWEEP``, per model shape and batch (``--tiles``): which tile reaches the
    touched bytes' roofline."""
    from kernels import moe_gemm as moe
    from kernels.graph_timing import time_ms
    from zoo import ModelConfig

    rows = []
    for name in names:
        cfg = ModelConfig.from_name(name)
        E, d, F, k = cfg.n_experts, cfg.d_model, cfg.expert_ffn_dim, cfg.n_experts_active
        w13 = torch.randn(E, 2 * F, d, device="cuda", dtype=torch.bfloat16) * d ** -0.5
        w2 = torch.randn(E, d, F, device="cuda", dtype=torch.bfloat16) * F ** -0.5
        for b in batches:
            if b * k > 1024:
                continue
            h = torch.randn(b, d, device="cuda", dtype=torch.bfloat16)
            w, idx = torch.topk(torch.softmax(torch.randn(b, E, device="cuda"), -1), k, -1)
            w = w.to(torch.bfloat16)
            touched = int(idx.unique().numel())
            for tile in SWEEP:
                try:
                    args = (h, w13, w2, w, idx)
                    us = time_ms(lambda t=tile, a=args: moe.moe_experts(*a, tile=t)) * 1e3
                except Exception as e:  # noqa: BLE001 - a tile the GPU refuses: recorded
                    us = float("nan")
                    print(f"{name} b{b} {tile}: {type(e).__name__}", flush=True)
                rows.append({"model": name, "batch": b, "tile": list(tile), "us": us,
                             "touched_bytes_us": touched * 3 * d * F * 2 / copy_bw * 1e6,
                             "shipped": list(tile) == list(moe.tiles(b * k, E))})
            best = min((r for r in rows if r["model"] == name and r["batch"] == b),
                       key=lambda r: r["us"] if r["us"] == r["us"] else 1e9)
            print(json.dumps(best), flush=True)
        del w13, w2
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--models", default="olmoe_1b_7b,qwen3_30b_a3b")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--skip-models", action="store_true", help="the layer rows only")
    ap.add_argument("--tiles", action="store_true", help="only the grouped GEMMs' tile sweep")
    a = ap.parse_args(argv)
    from sweep.measure.ceilings import copy_rate

    a.out.mkdir(parents=True, exist_ok=True)
    names, batches = a.models.split(","), [int(b) for b in a.batches.split(",")]
    copy_bw = copy_rate("cuda")["copy_bytes_s"]
    out = {"env": _env(), "copy_bytes_s": copy_bw, "command": " ".join(sys.argv)}
    if a.tiles:
        out["tiles"] = tile_rows(names, batches, copy_bw)
        (a.out / "moe_tiles.json").write_text(json.dumps(out, indent=1))
        return 0
    out["layer"] = layer_rows(names, batches, copy_bw)
    out["model"] = [] if a.skip_models else model_rows(names, batches, copy_bw)
    (a.out / "moe_probe.json").write_text(json.dumps(out, indent=1))
    lines = [f"# MoE decode probe on {out['env']['device']} (copy {copy_bw / 1e12:.2f} TB/s)", "",
             "| model | batch | TPOT ms | tok/s | roofline ms | of roofline | predicted ms | "
             "pred. error |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['batch']} | {r['tpot_ms']:.3f} | {r['decode_tok_s']:.0f} | "
              f"{r['roofline_ms']:.3f} | {r['frac_roofline']:.2f} | {r['pred_ms']:.3f} | "
              f"{r['pred_error_pct']:+.1f}%{' (a)' if r['pred_notes'] else ''} |"
              for r in out["model"]]
    if any(r["pred_notes"] for r in out["model"]):
        lines += ["", "(a) priced from the shipped calibration as it is, with notes (entries "
                  "interpolated or stood in for; a study measures them on first use): see "
                  "moe_probe.json's pred_notes"]
    lines += ["", "| layer | batch | touched | touched bytes us | zoo Triton us | loop graph us | "
              "transformers eager us | rel. err |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['batch']} | {r['touched']} | {r['touched_bytes_us']:.1f} | "
              f"{r['zoo_triton_us']:.1f} | {r['loop_graph_us']:.1f} | "
              f"{r['transformers_eager_us']:.1f} | {r['rel_err_vs_transformers']:.1e} |"
              for r in out["layer"]]
    (a.out / "moe_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
