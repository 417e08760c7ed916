"""Where the decode MLP's SwiGLU pays on the GPU (issue 34): the ``w2`` GEMV with the SwiGLU in
its prologue (as the decode step runs it) against the same GEMV on a ready ``silu(g) * u`` input
(what a ``w13`` epilogue writing it would leave), and the ``w13`` GEMV alone, Llama-3.2-1B's
shapes (``d_model`` 2048, ``ffn_dim`` 8192), one and eight rows; each call cold (after a read of
2.5x the L2), replayed in a CUDA graph (``kernels.graph_timing.time_ms``), the shipped tiles.

    python -m bench.swiglu_split_probe OUT.csv
"""

from __future__ import annotations

import functools
import sys

import torch

from bench.gpu import write_rows
from kernels import gemv as G
from kernels.graph_timing import time_ms


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "swiglu_split.csv"
    dt, dev = torch.bfloat16, "cuda"
    d, f = 2048, 8192
    w13 = torch.randn(2 * f, d, device=dev, dtype=dt) / d**0.5
    w2 = torch.randn(d, f, device=dev, dtype=dt) / f**0.5
    rows = []
    for M in (1, 8):
        x = torch.randn(M, d, device=dev, dtype=dt)
        gu = torch.randn(M, 2 * f, device=dev, dtype=dt)
        h = torch.randn(M, f, device=dev, dtype=dt)
        cases = {"w13 none": functools.partial(G.gemv, x, w13),
                 "w2 swiglu prologue": functools.partial(G.gemv, gu, w2, prologue="swiglu"),
                 "w2 none (input ready)": functools.partial(G.gemv, h, w2)}
        for name, fn in cases.items():
            us = time_ms(fn, cold=True) * 1e3
            nbytes = (w13 if name.startswith("w13") else w2).numel() * 2
            rows.append({"M": M, "case": name, "us": round(us, 2),
                         "weight_TBps": round(nbytes / (us * 1e-6) / 1e12, 3)})
            print(rows[-1], flush=True)
    write_rows(out, rows)


if __name__ == "__main__":
    main()
