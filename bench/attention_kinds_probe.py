"""Local (sliding-window) layers at long context on the GPU (issue 39): a local layer's decode
does not grow with the context past its window, and each kind's decode against its roofline.

    python -m bench.attention_kinds_probe OUT_DIR [--contexts 8192,16384,32768] [--batches 1,8]

``layer``: one layer's decode attention alone (``kernels.decode_attention``, the step's RoPE and
cache write folded in, bf16, Llama-3.2-1B's heads: 32 query / 8 KV heads of 64), replayed in a
CUDA graph (``kernels.graph_timing.time_ms``, cold: each call after a read of 2.5x the L2): a
global layer's cache of every position against a local layer's ring of ``W`` slots, at each
context. ``model``: Llama-3.2-1B as built (``gqa8``), with a 5:1 local/global pattern over a
1024-token window (``L5G1_w1024``) and with every layer local over 4096 (``local_w4096``,
Mistral-7B-v0.1's kind) and with DeepSeek-V2-Lite's latent attention (``mla``), random bf16
weights, ``cudagraph`` mode: a prompt of each context, then
32 decode steps, TPOT the median of 3 timed runs; ``frac_roofline``: ``zoo.counts.decode_step``'s
minimum bytes (a local layer reading its window) over the copy bandwidth measured here, over the
measured TPOT.

Output: ``OUT_DIR/attention_kinds.json`` and ``attention_kinds.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

DESIGNS = {"gqa8": {}, "L5G1_w1024": {"sliding_window": 1024, "layer_types": "5:1"},
           "local_w4096": {"sliding_window": 4096},
           # latent attention on the same body: DeepSeek-V2-Lite's attention (16 heads, a latent
           # of 512 and a RoPE key of 64 cached; nope 128, v 128), kernels.mla_decode
           "mla": {"n_heads": 16, "n_kv_heads": 16, "head_dim": 64, "kv_lora_rank": 512,
                   "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}}


def layer_rows(contexts, batches, copy_bw) -> list[dict]:
    """One layer's decode attention, global cache against a ring, at each context (module doc)."""
    from kernels.decode_attention import decode_attention
    from kernels.graph_timing import time_ms

    H, Hkv, D, W = 32, 8, 64, 1024
    rows = []
    for b in batches:
        for ctx in contexts:
            for kind, cap in (("global", ctx + 1), ("local_w1024", W)):
                k = torch.randn(b, Hkv, cap, D, device="cuda", dtype=torch.bfloat16)
                v = torch.randn_like(k)
                q = torch.randn(b, H, D, device="cuda", dtype=torch.bfloat16)
                kn, vn = torch.randn(2, b, Hkv, D, device="cuda", dtype=torch.bfloat16)
                ang = torch.rand(ctx + 1, D // 2, device="cuda")
                cos = torch.cat([ang.cos()] * 2, -1).contiguous()
                sin = torch.cat([ang.sin()] * 2, -1).contiguous()
                pos = torch.tensor([ctx], device="cuda")
                args = (q, k, v, pos)
                extra = {"new_kv": (kn, vn, cos, sin)}
                us = 1e3 * time_ms(lambda a=args, e=extra: decode_attention(*a, **e))
                read = 2 * b * Hkv * min(ctx + 1, cap) * D * 2
                rows.append({"batch": b, "context": ctx, "layer": kind, "us": us,
                             "kv_read_bytes": read, "frac_copy": read / copy_bw / (us * 1e-6)})
                print(json.dumps(rows[-1]), flush=True)
                del k, v
    return rows


def model_rows(contexts, batches, copy_bw, steps=32, designs=None) -> list[dict]:
    """TPOT of each design (``designs``: these names, default all) at each context and batch
    (module doc)."""
    from zoo import Generator, ModelConfig, Transformer, counts

    from .tpot import tpot_runs

    rows = []
    for name, over in DESIGNS.items():
        if designs and name not in designs:
            continue
        cfg = ModelConfig.from_name("llama3_2_1b", **over).resolved("cuda")
        model = Transformer.build(cfg, "cuda", seed=0)
        for b in batches:
            for ctx in contexts:
                gen = Generator(model, b, ctx + steps + 8, "cudagraph")
                toks = torch.randint(0, cfg.vocab_size, (b, ctx), device="cuda")
                times = tpot_runs(gen, toks, steps, 4)
                tpot = statistics.median(times)
                st = counts.decode_step(cfg, b, ctx + steps // 2)
                roof = st.min_bytes / copy_bw * 1e3
                rows.append({"design": name, "batch": b, "context": ctx, "tpot_ms": tpot,
                             "tpot_ms_min": min(times), "tpot_ms_max": max(times),
                             "decode_tok_s": b / tpot * 1e3, "min_bytes": st.min_bytes,
                             "kv_read_bytes": st.bytes["kv_read"],
                             "kv_cache_bytes": counts.kv_cache_bytes(cfg, b, ctx + steps + 8),
                             "roofline_ms": roof, "frac_roofline": roof / tpot})
                print(json.dumps(rows[-1]), flush=True)
                del gen
                torch.cuda.empty_cache()
        del model
        torch.cuda.empty_cache()
    return rows


def _md(out: dict) -> str:
    lines = [f"copy bandwidth {out['copy_bytes_s'] / 1e12:.2f} TB/s; {out['env']}", "",
             "| layer | batch | context | decode attention us | KV read MB | of copy |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['layer']} | {r['batch']} | {r['context']} | {r['us']:.1f} | "
              f"{r['kv_read_bytes'] / 1e6:.1f} | {r['frac_copy']:.2f} |" for r in out["layer"]]
    lines += ["", "| design | batch | context | TPOT ms | tok/s | KV cache MB | of roofline |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['design']} | {r['batch']} | {r['context']} | {r['tpot_ms']:.3f} | "
              f"{r['decode_tok_s']:.0f} | {r['kv_cache_bytes'] / 1e6:.0f} | "
              f"{r['frac_roofline']:.2f} |" for r in out["model"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--contexts", default="8192,16384,32768")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--skip-layers", action="store_true")
    ap.add_argument("--designs", help="comma-separated DESIGNS names (default: all)")
    a = ap.parse_args(argv)
    from sweep.measure.ceilings import copy_rate

    a.out.mkdir(parents=True, exist_ok=True)
    contexts = [int(c) for c in a.contexts.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
    bw = copy_rate("cuda")["copy_bytes_s"]
    out = {"env": f"{torch.cuda.get_device_name()}, torch {torch.__version__}",
           "copy_bytes_s": bw,
           "layer": [] if a.skip_layers else layer_rows(contexts, batches, bw)}
    out["model"] = [] if a.skip_models else model_rows(
        contexts, batches, bw, designs=a.designs.split(",") if a.designs else None)
    (a.out / "attention_kinds.json").write_text(json.dumps(out, indent=1))
    (a.out / "attention_kinds.md").write_text(_md(out))
    print(_md(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
