"""The dot-path GEMV (2-16 rows) with more programs per SM, timed cold (issue 34's next lever).

    python -m bench.gemv_tiles_probe OUT.csv

Under ncu (``results/reference/decode_ncu_h100.md``) every batch-8 GEMV of the main job's step was
tuned to about one program per SM (grids of 128-136 on 132 SMs, occupancy 6-14%): out_proj
reads at 33% of peak DRAM, w2 at 59%. Here each decode GEMV of the main job's MQA design and of
Llama-3.1-8B at 8 rows runs the shipped tile (``kernels.gemv.gemv``, tuned) and a set of fixed
tiles with wider grids (``SPLIT_K`` 16 or ``BLOCK_N`` 64 / 32), each timed cold in a CUDA graph
(``kernels.graph_timing.time_ms``: after a read of 2.5x the L2, as a decode step meets a layer's
weight), its output checked against the shipped tile's. Nothing shipped changes; a tile that
wins is for the autotune space (a GEMV code change: its choices and calibration measured again).
"""

from __future__ import annotations

import functools
import sys

import torch
import triton

from bench.gpu import write_rows
from kernels.gemv import gemv
from kernels.graph_timing import time_ms

SHAPES = [  # name, M, N, K, prologue
    ("mqa_qkv", 8, 2176, 2048, "norm+res"), ("mqa_out", 8, 2048, 2048, "none"),
    ("1b_w13", 8, 16384, 2048, "norm+res"), ("1b_w2", 8, 2048, 8192, "swiglu"),
    ("8b_out", 8, 4096, 4096, "none"), ("8b_w2", 8, 4096, 14336, "swiglu"),
]
TILES = [  # BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages, W_AHEAD
    (128, 128, 8, 4, 4, 0), (128, 128, 16, 4, 4, 0), (128, 128, 16, 8, 4, 0),
    (128, 64, 16, 4, 4, 0), (64, 128, 8, 4, 4, 0), (64, 128, 16, 4, 4, 0),
    (64, 256, 8, 4, 3, 0), (64, 64, 16, 4, 4, 0), (32, 128, 8, 4, 4, 0),
    (32, 128, 16, 4, 4, 0), (64, 128, 8, 4, 4, 1), (128, 128, 16, 4, 4, 1),
]


def _run(x, w, base, nw, res, cfg=None):
    y = gemv(x, w, None, base, nw, 1e-5, res, config=cfg)
    return y[0] if isinstance(y, tuple) else y


def shape_runner(M: int, N: int, K: int, pro: str):
    """``run(cfg=None)``: the decode GEMV of one shape (``M`` rows, ``[N, K]`` weight, prologue
    ``pro``: ``none``, ``norm`` or ``swiglu``, ``+res`` with a residual) on random bf16 inputs
    (seed 0) on the GPU, at the fixed tile ``cfg`` or the shipped choice; returns ``y [M, N]``."""
    dev, dt = torch.device("cuda"), torch.bfloat16
    base = pro.split("+")[0]
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, 2 * K if base == "swiglu" else K, device=dev, dtype=dt, generator=g)
    w = torch.randn(N, K, device=dev, dtype=dt, generator=g) / K**0.5
    nw = torch.ones(K, device=dev, dtype=dt) if base == "norm" else None
    res = torch.randn(M, K, device=dev, dtype=dt, generator=g) if pro.endswith("+res") else None
    return functools.partial(_run, x, w, base, nw, res)


def main(out: str) -> None:
    rows = []
    for name, M, N, K, pro in SHAPES:
        run = shape_runner(M, N, K, pro)
        ref = run().float()
        shipped = round(time_ms(run, cold=True) * 1e3, 2)
        row = {"shape": name, "M": M, "N": N, "K": K, "prologue": pro,
               "weight_MB": round(N * K * 2 / 1e6, 1), "shipped_us": shipped,
               "ideal_us_at_3TBps": round(N * K * 2 / 3.0e12 * 1e6, 2)}
        best = ("shipped", shipped)
        for bn, bk, sk, nwp, st, wa in TILES:
            cfg = dict(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sk, num_warps=nwp, num_stages=st,
                       W_AHEAD=wa, PREFETCH_X=0)
            tag = f"n{bn}_k{bk}_s{sk}_w{nwp}_st{st}" + ("_ahead" if wa else "")
            try:
                diff = float((run(cfg).float() - ref).abs().max())
                t = round(time_ms(functools.partial(run, cfg), cold=True) * 1e3, 2)
                row[tag] = t if diff < 0.05 * float(ref.abs().max()) + 1e-2 else f"wrong {diff:.3g}"
                grid = triton.cdiv(N, bn) * sk
                row[tag + "_grid"] = grid
                if isinstance(row[tag], float) and t < best[1]:
                    best = (tag, t)
            except Exception as e:  # a tile that does not fit (shared memory)
                row[tag] = f"{type(e).__name__}"
        row["best"], row["best_us"] = best
        rows.append(row)
        print({k: v for k, v in row.items() if not k.endswith("_grid")}, flush=True)
        write_rows(out, rows)


if __name__ == "__main__":
    main(sys.argv[1])
