"""The MoE grouped GEMMs' tiles on a GPU (issue 38): each of ``kernels.moe_gemm``'s two kernels
(``moe_up``, ``moe_down``) timed under candidate tiles at the decode and prefill token counts of
OLMoE-1B-7B, Qwen3-30B-A3B and Mixtral-8x7B's layer, uniform routing, the weights read cold
(``sweep.measure.microbench``'s timer). The two kernels share the alignment's block
(``BLOCK_M``), so the table gives, per ``BLOCK_M``, each kernel's best other choices: what
``kernels.moe_gemm.tiles`` should return.

    python -m bench.moe_tiles_probe OUT      # OUT/moe_tiles_probe.json and the best per block
"""

from __future__ import annotations

import itertools
import json
import sys

SHAPES = {"olmoe": (64, 8, 2048, 1024), "qwen3_30b_a3b": (128, 8, 2048, 768),
          "mixtral": (8, 2, 4096, 14336)}
TOKENS = (8, 64, 4096, 16384)


def candidates(decode: bool):
    """``(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)`` to try."""
    bms = (16, 32) if decode else (64, 128)
    for bm, bn, bk, w, s in itertools.product(bms, (64, 128), (64, 128), (4, 8), (3, 4)):
        if bm * bk + 2 * bk * bn <= 3 * 128 * 64:  # shared memory per stage, bf16, roughly
            yield (bm, bn, bk, w, s)


def main() -> int:
    import torch

    from bench.gpu import setup
    from kernels import moe_gemm as K_

    out, tm, rnd = setup(5)

    rows = []
    for name, (E, k, d, Fe) in SHAPES.items():
        w13, w2 = rnd(E, 2 * Fe, d), rnd(E, d, Fe)
        for M in TOKENS:
            S = M * k
            x, act, w = rnd(M, d), rnd(S, Fe), rnd(M, k).abs()
            idx = rnd(M, E, dt=torch.float32).topk(k, dim=-1).indices
            today = K_.tiles(S, E)
            for tile in candidates(S <= 1024):
                al = K_.align(idx, E, tile[0])
                up = (x, w13, k, al, tile)
                down = (act, w2, w, al, tile)
                for op, fn in (("moe_up", lambda a=up: K_.moe_up(*a)),
                               ("moe_down", lambda a=down: K_.moe_down(*a))):
                    try:
                        us = tm(fn, n=2 if S > 1024 else 8, duty=S > 1024)["median"] * 1e6
                    except Exception as e:  # out of shared memory / registers
                        rows.append(dict(model=name, M=M, op=op, tile=list(tile), error=str(e)[:120]))
                        continue
                    n = 2 * Fe if op == "moe_up" else d
                    kk = d if op == "moe_up" else Fe
                    rows.append(dict(model=name, M=M, op=op, tile=list(tile), us=us,
                                     today=tile == today, tflops=2.0 * S * n * kk / us / 1e6))
            for bm in sorted({r["tile"][0] for r in rows if r["model"] == name and r["M"] == M}):
                for op in ("moe_up", "moe_down"):
                    got = [r for r in rows if r["model"] == name and r["M"] == M and r["op"] == op
                           and r["tile"][0] == bm and "us" in r]
                    if got:
                        best = min(got, key=lambda r: r["us"])
                        now = next((r["us"] for r in got if r["today"]), None)
                        print(json.dumps(dict(model=name, M=M, op=op, BLOCK_M=bm, best=best["tile"],
                                              best_us=round(best["us"], 1), today_us=now)),
                              flush=True)
    (out / "moe_tiles_probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
