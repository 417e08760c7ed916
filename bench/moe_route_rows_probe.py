"""A long prompt's routing (``kernels.moe_align.route_rows``) over its tile, with and without a
routing skew's draw (on an H200, 2026-11-28, 16 programs of 32 rows took 6.7 us a layer of
Qwen3-30B-A3B's 512-token prompt as the router built it, 104 us with the draw:
``results/reference/moe_h100.md``).

    python -m bench.moe_route_rows_probe OUT.csv

For 512 and 4096 rows of Qwen3-30B-A3B's router (128 experts; OLMoE-1B-7B's 64 with ``SHAPES``),
top 8, renormalised: rows a program (``block_m``) 1-32 and 1 or 4 warps, each timed cold in a CUDA
graph (``kernels.graph_timing.time_ms``; the draw's seed advances each call), the routing without
a draw compared with the default tile's (``route_rows_block``). (The run of 2026-11-28, cut
by its time limit, timed (512, 64) with 1, 2 and 4 warps.)
"""

from __future__ import annotations

import sys

import torch

from bench.gpu import write_rows
from kernels import moe_align
from kernels.graph_timing import time_ms

SHAPES = [(512, 128), (4096, 128)]  # (rows, experts)
WARPS = (1, 4)
K = 8


def main(out: str) -> None:
    dev = torch.device("cuda")
    rows = []
    for M, E in SHAPES:
        g = torch.Generator(device=dev).manual_seed(M + E)
        logits = torch.randn(M, E, device=dev, dtype=torch.bfloat16, generator=g)
        prior = torch.log(torch.full((E,), 1.0 / E, device=dev))
        seed = torch.zeros(1, device=dev, dtype=torch.int64)
        default = moe_align.route_rows_block(M, E)
        want = moe_align.route_rows(logits, K, True, torch.bfloat16)
        for draw in (False, True):
            for bm in (1, 2, 4, 8, 16, 32):
                for nw in WARPS:
                    kw = dict(draw=(prior, seed) if draw else None, block_m=bm, num_warps=nw)
                    same = None
                    if not draw:
                        got = moe_align.route_rows(logits, K, True, torch.bfloat16, **kw)
                        same = bool(torch.equal(got[1], want[1]) and torch.equal(got[0], want[0]))
                    try:
                        us = round(time_ms(lambda kw=kw, lg=logits: moe_align.route_rows(
                            lg, K, True, torch.bfloat16, **kw), cold=True) * 1e3, 2)
                    except Exception as e:  # noqa: BLE001 - a tile that does not compile or fit
                        us = repr(e)[:80]
                    rows.append(dict(M=M, E=E, k=K, draw=draw, block_m=bm, warps=nw, us=us,
                                     default=bm == default and nw == 4, same_as_default=same))
                    print(rows[-1], flush=True)
        write_rows(out, rows)


if __name__ == "__main__":
    main(sys.argv[1])
