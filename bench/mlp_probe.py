"""The decode MLP block in one launch against the two launches the step runs today (issue 34's
"fewer, fuller launches": a probe; nothing in the model calls ``kernels.decode_mlp`` yet).

    python -m bench.mlp_probe OUT.csv

For the MLP of Llama-3.2-1B (d 2048, F 8192) and Llama-3.1-8B (4096, 14336) at 1 and 8 rows:
the step's path (``kernels.decode_linear.linear``: w13 with the norm and residual add in its
prologue, then w2 with SwiGLU; the shipped tile and GEMV-or-cuBLAS choices, PDL as the step
launches them) against ``kernels.decode_mlp.decode_mlp`` over a set of fixed tiles, with and
without the L2 prefetch of the second GEMV's weights and PDL; each timed cold in a CUDA graph
(``kernels.graph_timing.time_ms``: after a read of 2.5x the L2, as the step meets a layer), the
output checked against the two launches'. Writes one row per (shape, variant).
"""

from __future__ import annotations

import functools
import sys

import torch
from torch import nn

from bench.gpu import write_rows
from kernels import decode_linear, decode_mlp
from kernels.gemv import pdl_supported
from kernels.graph_timing import time_ms
from zoo.norms import RMSNorm

SHAPES = [("1b", 2048, 8192), ("8b", 4096, 14336)]
TILES = [  # BN1, BK1, SK1, BN2, BK2, SK2, num_warps, num_stages
    (128, 128, 1, 128, 128, 8, 8, 3), (128, 128, 1, 128, 128, 8, 4, 3),
    (64, 128, 1, 64, 128, 4, 4, 3), (128, 64, 2, 128, 64, 8, 4, 4),
    (64, 256, 1, 32, 256, 4, 4, 3), (128, 128, 2, 64, 128, 8, 8, 3),
]
KEYS = ("BN1", "BK1", "SK1", "BN2", "BK2", "SK2", "num_warps", "num_stages")


def _two_launches(x, r, norm, w13, w2):
    """The step's MLP today: w13 (norm + residual prologue), then w2 (SwiGLU prologue)."""
    gu, h = decode_linear.linear(x, w13, "norm", norm, r)
    return decode_linear.linear(gu, w2, "swiglu"), h


def main(out: str) -> None:
    dev, dt = torch.device("cuda"), torch.bfloat16
    pdl = pdl_supported(dev)
    rows = []
    for name, D, F in SHAPES:
        g = torch.Generator(device=dev).manual_seed(0)
        w13 = nn.Linear(D, 2 * F, bias=False, device=dev, dtype=dt)
        w2 = nn.Linear(F, D, bias=False, device=dev, dtype=dt)
        with torch.no_grad():
            w13.weight.copy_(torch.randn(2 * F, D, device=dev, dtype=dt, generator=g) / D**0.5)
            w2.weight.copy_(torch.randn(D, F, device=dev, dtype=dt, generator=g) / F**0.5)
        norm = RMSNorm(D, 1e-5).to(dev, dt)
        for M in (1, 8):
            x = torch.randn(1, M, D, device=dev, dtype=dt, generator=g)
            r = torch.randn(1, M, D, device=dev, dtype=dt, generator=g)

            step = functools.partial(_two_launches, x, r, norm, w13, w2)
            want = step()[0].float()
            base = time_ms(step, cold=True) * 1e3
            wbytes = 3 * D * F * 2
            row0 = {"shape": name, "M": M, "d": D, "F": F, "weight_MB": round(wbytes / 1e6, 1),
                    "two_launches_us": round(base, 2)}
            rows.append(dict(row0, variant="two launches (shipped)", us=round(base, 2),
                             GBps=round(wbytes / base / 1e3, 0), max_err=0.0))
            print(rows[-1], flush=True)
            for t in TILES:
                cfg = dict(zip(KEYS, t))
                for pre in (True, False):
                    for p in ((False, True) if pdl else (False,)):
                        run = functools.partial(decode_mlp.decode_mlp, x, r, norm.weight,
                                                w13.weight, w2.weight, 1e-5, cfg, pdl=p,
                                                prefetch=pre)
                        try:
                            y = run()[0].float()
                            torch.cuda.synchronize()
                            us = time_ms(run, cold=True) * 1e3
                            err = ((y - want).abs().max() / want.abs().max()).item()
                        except Exception as e:  # noqa: BLE001 - a tile that does not compile
                            us, err = float("nan"), repr(e)[:120]
                        rows.append(dict(row0, variant=f"one launch {t} prefetch={int(pre)} "
                                         f"pdl={int(p)}", us=round(us, 2),
                                         GBps=round(wbytes / us / 1e3, 0), max_err=err))
                        print(rows[-1], flush=True)
    write_rows(out, rows)


if __name__ == "__main__":
    main(sys.argv[1])
