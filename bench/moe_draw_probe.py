"""What a routing draw costs inside the fused routing kernels (``workload.routing=uniform`` or a
``routing_skew``): ``router_route`` (a decode step of at most 8 tokens) and ``route_align`` (more
tokens, after cuBLAS's router GEMM), each with and without ``draw``, over OLMoE-1B-7B's router
shape (d 2048, top 8) at 64 and 128 experts, the top k's weights renormalised or not (Qwen3-MoE
and Mixtral renormalise, OLMoE does not).

    python -m bench.moe_draw_probe OUT.csv

A batch-8 step of 128 experts measured its ``router_route`` at 36.6 us under the draw against 9.7
without (H200, 2026-11-28, the draw made by the last program alone). Each variant timed cold in
a CUDA graph (``kernels.graph_timing.time_ms``); under the draw, the counter advances each call.
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
from zoo import routing


def main(out: str) -> None:
    dev, dt, d, k = torch.device("cuda"), torch.bfloat16, 2048, 8
    rows = []
    for E in (64, 128):
        g = torch.Generator(device=dev).manual_seed(E)
        wr = torch.randn(E, d, device=dev, dtype=dt, generator=g) * d ** -0.5
        prior = torch.tensor(routing.zipf_prior(E, 0.0), dtype=torch.float32).log().to(dev)
        seed = torch.zeros(1, dtype=torch.int64, device=dev)
        for M in (1, 8, 16, 64):
            if not moe.fused_route(M * k, E):  # past route_align's cells (64 x 8 over 128)
                continue
            h = torch.randn(M, d, device=dev, dtype=dt, generator=g)
            for draw, renorm in ((None, False), ((prior, seed), False), (None, True)):
                if M <= moe_route.ROUTER_ROUTE_MAX_TOKENS:
                    fn, kernel = functools.partial(moe_route.router_route, h, wr, k, renorm, 16,
                                                   draw=draw), "router_route"
                else:
                    def fn(h=h, wr=wr, draw=draw, renorm=renorm):
                        return moe.route_align(F.linear(h, wr), k, renorm, 16, dt, draw=draw)
                    kernel = "F.linear + route_align"
                us = time_ms(fn, cold=True) * 1e3
                rows.append(dict(E=E, M=M, kernel=kernel, draw=draw is not None,
                                 renorm=renorm, us=round(us, 2)))
                print(rows[-1], flush=True)
    write_rows(out, rows)


if __name__ == "__main__":
    main(sys.argv[1])
