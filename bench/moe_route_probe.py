"""The MoE router's GEMM and ``route_align`` in one launch against the two launches a decode step
runs today (issue 38 item 2: the four small kernels around the experts cost 20 us a layer at
batch 1 on the H100, ``results/reference/moe_h100.md``; nothing in the model calls
``kernels.moe_route.router_route`` yet).

    python -m bench.moe_route_probe OUT.csv

For the OLMoE-1B-7B (d 2048, 64 experts, top 8, renormalised) and Qwen3-30B-A3B (d 2048, 128
experts, top 8) routers at 1 and 8 tokens: ``F.linear`` (cuBLAS) then ``route_align``, against
``router_route`` over a few tiles; then the experts' GEMMs with the slots' sum after (a torch
kernel) against the sum inside ``moe_down``'s launch. Each timed cold in a CUDA graph
(``kernels.graph_timing.time_ms``), the routing checked equal, the outputs compared.
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

SHAPES = [("olmoe", 2048, 64, 8, False), ("qwen3", 2048, 128, 8, True)]
WIDTH = {"olmoe": 1024, "qwen3": 768}  # expert_ffn_dim
TILES = [(2, 256, 4), (4, 256, 4), (8, 128, 4), (4, 512, 4), (2, 512, 8), (1, 1024, 4)]


def _two(h, wr, k, renorm):
    return moe.route_align(F.linear(h, wr), k, renorm, 16, h.dtype)


def main(out: str) -> None:
    dev, dt = torch.device("cuda"), torch.bfloat16
    rows = []
    for name, d, E, k, renorm in SHAPES:
        g = torch.Generator(device=dev).manual_seed(0)
        wr = torch.randn(E, d, device=dev, dtype=dt, generator=g) * d ** -0.5
        for M in (1, 8):
            h = torch.randn(M, d, device=dev, dtype=dt, generator=g)
            two = functools.partial(_two, h, wr, k, renorm)
            want = two()
            base = time_ms(two, cold=True) * 1e3
            rows.append(dict(shape=name, M=M, E=E, variant="F.linear + route_align", us=round(base, 2),
                             same_routing=True))
            print(rows[-1], flush=True)
            for eg, bk, nw in TILES:
                one = functools.partial(moe_route.router_route, h, wr, k, renorm, 16, block_eg=eg,
                                        block_k=bk, num_warps=nw)
                try:
                    got = one()
                    same = bool(torch.equal(got[1], want[1]) and torch.equal(got[2], want[2]))
                    us = time_ms(one, cold=True) * 1e3
                except Exception as e:  # noqa: BLE001 - a tile that does not compile
                    us, same = float("nan"), repr(e)[:100]
                rows.append(dict(shape=name, M=M, E=E, variant=f"router_route eg{eg} k{bk} w{nw}",
                                 us=round(us, 2), same_routing=same))
                print(rows[-1], flush=True)
        rows += _experts(name, d, E, k, renorm, WIDTH[name], dev, dt)
    write_rows(out, rows)


def _experts(name, d, E, k, renorm, Fe, dev, dt) -> list[dict]:
    """The experts' two grouped GEMMs with the slots' sum after (a torch kernel) against the sum
    in the down GEMM's launch (``moe_down(sum_k=k)``), timed cold, outputs compared."""
    g = torch.Generator(device=dev).manual_seed(1)
    w13 = torch.randn(E, 2 * Fe, d, device=dev, dtype=dt, generator=g) * d ** -0.5
    w2 = torch.randn(E, d, Fe, device=dev, dtype=dt, generator=g) * Fe ** -0.5
    rows = []
    for M in (1, 8):
        h = torch.randn(M, d, device=dev, dtype=dt, generator=g)
        logits = torch.randn(M, E, device=dev, dtype=dt, generator=g)
        tile = moe.tiles(M * k, E)
        w, idx, *aligned = moe.route_align(logits, k, renorm, tile[0], dt)
        ref = moe.moe_experts(h, w13, w2, w, idx, aligned)
        for fused in (False, True):
            run = functools.partial(moe.moe_experts, h, w13, w2, w, idx, aligned,
                                    sum_in_down=fused)
            err = ((run() - ref).abs().max() / ref.abs().max()).item()
            rows.append(dict(shape=name, M=M, E=E, variant="experts, sum " + (
                "in moe_down" if fused else "after (torch)"), us=round(time_ms(run, cold=True)
                                                                 * 1e3, 2), max_err=err))
            print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1])
