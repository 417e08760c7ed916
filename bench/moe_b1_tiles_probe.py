"""The batch-1 MoE kernels' tiles, each kernel timed alone (issue 38 item 2: after the two
levers, a batch-1 OLMoE-1B-7B layer on an H200 spends 19.9 us in ``moe_up``, 12.4 in ``moe_down``
and 7.6 in ``router_route``, against 16, 8 and ~0 us of bytes; ``results/reference/moe_h100.md``).

    python -m bench.moe_b1_tiles_probe OUT.csv

For the OLMoE-1B-7B (d 2048, 64 experts, top 8, width 1024) and Qwen3-30B-A3B (d 2048, 128
experts, top 8, width 768) layers at 1 and 8 tokens: ``router_route`` over warps and ``d`` chunks,
``route_align`` over warps, and the two grouped GEMMs (``moe_up``; ``moe_down`` with the slots'
sum, as the model launches them) over ``(BLOCK_N, BLOCK_K, warps, stages)`` with the decode
block of 16 rows. Each timed cold in a CUDA graph (``kernels.graph_timing.time_ms``), outputs
compared with the shipped tile's.
"""

from __future__ import annotations

import functools
import sys

import torch
import torch.nn.functional as F

from bench.gpu import write_rows
from kernels import moe_gemm as moe
from kernels import moe_route
from kernels.graph_timing import time_ms

SHAPES = [("olmoe", 2048, 64, 8, 1024), ("qwen3", 2048, 128, 8, 768)]
ROUTER = [(1, 1024, 4), (1, 1024, 2), (1, 1024, 1), (1, 2048, 4), (1, 2048, 2), (1, 512, 2),
          (2, 1024, 2)]
GEMM = [(bn, bk, w, st) for bn in (16, 32, 64, 128) for bk in (64, 128, 256)
        for w in (2, 4) for st in (3, 4)]


def _row(**kw):
    print(kw, flush=True)
    return kw


def _time(fn):
    try:
        return round(time_ms(fn, cold=True) * 1e3, 2)
    except Exception as e:  # noqa: BLE001 - a tile that does not compile or fit
        return repr(e)[:80]


def main(out: str) -> None:
    dev, dt = torch.device("cuda"), torch.bfloat16
    rows = []
    for name, d, E, k, Fe in SHAPES:
        g = torch.Generator(device=dev).manual_seed(0)
        wr = torch.randn(E, d, device=dev, dtype=dt, generator=g) * d ** -0.5
        w13 = torch.randn(E, 2 * Fe, d, device=dev, dtype=dt, generator=g) * d ** -0.5
        w2 = torch.randn(E, d, Fe, device=dev, dtype=dt, generator=g) * Fe ** -0.5
        for M in (1, 8):
            h = torch.randn(M, d, device=dev, dtype=dt, generator=g)
            lg = F.linear(h, wr)
            for eg, bk, nw in ROUTER:
                rows.append(_row(shape=name, M=M, kernel="router_route", tile=f"eg{eg} k{bk} w{nw}",
                                 us=_time(functools.partial(
                                     moe_route.router_route, h, wr, k, True, 16, block_eg=eg,
                                     block_k=bk, num_warps=nw))))
            for nw in (1, 2, 4, 8):
                rows.append(_row(shape=name, M=M, kernel="route_align", tile=f"w{nw}",
                                 us=_time(functools.partial(moe.route_align, lg, k, True, 16,
                                                            dt, num_warps=nw))))
            shipped = moe.tiles(M * k, E)
            w, idx, *aligned = moe.route_align(lg, k, True, shipped[0], dt)
            act = moe.moe_up(h, w13, k, aligned, shipped)
            want_up = act.float()
            want_down = moe.moe_down(act, w2, w, aligned, shipped, sum_k=k).float()
            for bn, bk, nw, st in GEMM:
                tile = (shipped[0], bn, bk, nw, st)
                for kern, fn, want in (
                        ("moe_up", functools.partial(moe.moe_up, h, w13, k, aligned, tile),
                         want_up),
                        ("moe_down", functools.partial(moe.moe_down, act, w2, w, aligned, tile,
                                                       sum_k=k), want_down)):
                    try:
                        err = ((fn().float() - want).abs().max() / want.abs().max()).item()
                    except Exception as e:  # noqa: BLE001
                        err = repr(e)[:80]
                    rows.append(_row(shape=name, M=M, kernel=kern, tile=str(tile),
                                     shipped=tile == shipped, us=_time(fn), max_err=err))
            write_rows(out, rows)


if __name__ == "__main__":
    main(sys.argv[1])
