"""The MoE router's GEMM and ``kernels.moe_gemm.route_align`` in one launch, for a decode step's
few tokens (issue 38 item 2: around the experts of a batch-1 step the router's cuBLAS GEMM and
``route_align`` cost 5.1 and 4.9 us a layer on the H100, ``results/reference/moe_h100.md``).

``cdiv(E, BLOCK_EG)`` programs each compute ``BLOCK_EG`` experts' logits of every token, ``h [M,
d] @ W_r[E, d]^T`` in float32 rounded to ``h``'s dtype (as ``nn.Linear`` rounds them), into a
float32 workspace; the last program to finish (an acq_rel counter, reset by it: CUDA's grid-sync
pattern, as ``kernels.split_merge`` merges) runs ``route_align``'s softmax, top k and sort
(``kernels.moe_gemm._route_align``). Minimum DRAM traffic: the router's ``E d`` weights, the
tokens and the routing. Reference: ``route_align(F.linear(h, W_r), ...)``.

Measured on an H200 (``results/reference/moe_h100.md``, 2026-11-28, fourteenth session): one
expert a program beat 2-8 a program at every shape (the last program's wait for fewer, longer
programs costs more than it saves); over the chunk of ``d`` and the warps (``moe_b1_tiles``), the
whole ``d`` in one chunk with 2 warps at one token (7.1 / 7.4 us for OLMoE's / Qwen3-30B-A3B's
router, against 7.7 / 9.3 for chunks of 1024 with 4 warps) and 4 warps at eight (8.8 / 10.6,
against 10.2 / 11.6; 2 warps spill there: 14-34 us). The default tile follows: chunks of up to
2048, ``min(4, rows x chunk / 1024)`` warps. The model takes this launch for a step of at most
``ROUTER_ROUTE_MAX_TOKENS`` tokens (the measured range: the ``[M, BLOCK_K]`` tile is held in
registers), else the two; under a routing skew too, the draw made in the logits' place
(``draw``: an H200, 2026-11-28, measured the draw as six torch launches a layer costing
Qwen3-30B-A3B's batch-1 step 3.03 -> 3.59 ms). Each program draws its own experts' logits, and
the last one reads them as it reads the router's: drawn by the last program alone, a batch-8
step of 128 experts took 36.6 us in this launch against 9.7 without a draw (H200, 2026-11-28,
``results/reference/moe_h100.md``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .moe_align import _drawn_logits
from .moe_gemm import _pdl, _route_align, _route_meta, fused_route
from .split_merge import counters

# the model routes a step of at most this many tokens in one launch (``fused_router``); its
# mirror, ``zoo.moe.ROUTER_ROUTE_MAX_TOKENS``, is held equal by tests/kernels/test_moe_gemm.py
ROUTER_ROUTE_MAX_TOKENS = 8


def fused_router(tokens: int, n_experts: int, k: int) -> bool:
    """Whether a step of ``tokens`` tokens over ``n_experts`` (top ``k``) runs the router's GEMM
    and ``route_align`` as one launch (``router_route``)."""
    return tokens <= ROUTER_ROUTE_MAX_TOKENS and fused_route(tokens * k, n_experts)


@triton.jit
def _router_route_kernel(h_ptr, wr_ptr, lg_ptr, dr_ptr, cnt_ptr, w_ptr, idx_ptr, ids_ptr,
                         bexp_ptr, prior_ptr, seed_ptr, M, E, K, n_blocks, TOPK: tl.constexpr,
                         RENORM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr,
                         BLOCK_S: tl.constexpr, BLOCK_B: tl.constexpr, BM: tl.constexpr,
                         BLOCK_EG: tl.constexpr, BLOCK_K: tl.constexpr, DRAW: tl.constexpr,
                         PDL: tl.constexpr = False):
    # program p: the router's logits of experts [p BLOCK_EG, (p + 1) BLOCK_EG) for the M rows,
    # h [M, K] @ wr [E, K]^T in float32, rounded to h's dtype as the router's GEMM rounds them,
    # into lg [M, E] (float32); the last program to finish (an acq_rel counter, reset by it)
    # routes and sorts them (_route_align): the router's GEMM and route_align in one launch;
    # DRAW: a routing skew's draw in the logits' place, each program drawing its own experts'
    # into dr [M, E] (the last one reads them as it reads the logits, and advances the seed
    # that every program read before its count); PDL: the normed rows waited for first, the
    # next kernel (moe_up, which waits for all of this one) let launch after the GEMM
    if PDL:
        tl.extra.cuda.gdc_wait()
    rows = tl.arange(0, BLOCK_M)
    rmask = rows < M
    es = tl.program_id(0) * BLOCK_EG + tl.arange(0, BLOCK_EG)
    emask = es < E
    acc = tl.zeros([BLOCK_M, BLOCK_EG], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        kmask = ks < K
        h = tl.load(h_ptr + rows[:, None] * K + ks[None, :], mask=rmask[:, None] & kmask[None, :],
                    other=0.0).to(tl.float32)
        w = tl.load(wr_ptr + es[:, None].to(tl.int64) * K + ks[None, :],
                    mask=emask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(h[:, None, :] * w[None, :, :], axis=2)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    lg = acc.to(h_ptr.dtype.element_ty).to(tl.float32)
    tile = rows[:, None] * E + es[None, :]
    tmask = rmask[:, None] & emask[None, :]
    tl.store(lg_ptr + tile, lg, mask=tmask)  # (stored under DRAW too: the GEMM still runs)
    if DRAW:  # this program's experts' draw (the seed read before the count below)
        seed = tl.load(seed_ptr)
        tl.store(dr_ptr + tile, _drawn_logits(prior_ptr, seed, rows, es, tmask, E), mask=tmask)
    tl.debug_barrier()  # every thread's logits before the count (CUDA's grid-sync pattern)
    if tl.atomic_add(cnt_ptr, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        tl.debug_barrier()
        tl.store(cnt_ptr, 0)
        # routed from the drawn logits under DRAW, advancing the seed every program has read
        _route_align(dr_ptr if DRAW else lg_ptr, w_ptr, idx_ptr, ids_ptr, bexp_ptr, prior_ptr,
                     seed_ptr, M, E, n_blocks, TOPK, RENORM, BLOCK_M, BLOCK_E, BLOCK_S, BLOCK_B,
                     BM, True, DRAW)


def router_route(h: torch.Tensor, router_w: torch.Tensor, k: int, renorm: bool, block_m: int,
                 block_eg: int = 1, block_k: int | None = None, num_warps: int | None = None,
                 draw: tuple | None = None, pdl: bool = False):
    """The router's GEMM and ``route_align`` in one launch (a decode step's few tokens, the same
    limits): ``cdiv(E, block_eg)`` programs each compute ``block_eg`` experts' logits of every
    token (rounded to ``h``'s dtype, as ``nn.Linear``), the last to finish routes and sorts them.

    Args:
        h: ``[M, d]`` the normed hidden states. router_w: ``[E, d]`` (``nn.Linear``'s weight).
        k, renorm, block_m: as ``route_align``. block_eg, block_k, num_warps: the tile (by
            default one expert a program, ``d`` in chunks of up to 2048, ``min(4, rows x chunk /
            1024)`` warps: the module doc).
        draw: ``(log_prior [E] float32, seed [1] int64)``: a routing skew's draw routed in the
            logits' place, as ``kernels.moe_gemm.route_align`` takes it (the GEMM still runs).
        pdl: launched with programmatic dependent launch (``kernels.moe_gemm``'s module doc).

    Returns:
        ``(weights [M, k] h.dtype, idx [M, k] int64, sorted_ids, block_expert)``.

    Raises:
        ValueError: a router whose rows are not ``d`` wide; a step past ``route_align``'s
            limits (``fused_route``) or of more than ``ROUTER_ROUTE_MAX_TOKENS`` tokens.
    """
    M, K = h.shape
    E = router_w.shape[0]
    if router_w.shape[1] != K:
        raise ValueError(f"router_route: router_w {tuple(router_w.shape)} does not take d = {K}")
    if not fused_router(M, E, k):
        raise ValueError(f"router_route: {M} tokens, top {k} of {E} experts are past its limits "
                         f"(at most {ROUTER_ROUTE_MAX_TOKENS} tokens and route_align's: "
                         "fused_router)")
    router_w = router_w.contiguous()
    S = M * k
    block_k = block_k or min(2048, triton.next_power_of_2(K))
    num_warps = num_warps or min(4, max(1, triton.next_power_of_2(M) * block_k // 1024))
    n_blocks = triton.cdiv(S, block_m) + min(E, S)
    dev = h.device
    lg = torch.empty(M, E, device=dev, dtype=torch.float32)
    dr = torch.empty(M, E, device=dev, dtype=torch.float32) if draw is not None else lg
    w = torch.empty(M, k, device=dev, dtype=h.dtype)
    idx = torch.empty(M, k, device=dev, dtype=torch.int64)
    ids = torch.empty(n_blocks * block_m, device=dev, dtype=torch.int32)
    bexp = torch.empty(n_blocks, device=dev, dtype=torch.int32)
    prior, seed = draw if draw is not None else (lg, idx)  # (unread without a draw)
    pdl = _pdl(pdl, h)
    _router_route_kernel[(triton.cdiv(E, block_eg),)](
        h.contiguous(), router_w, lg, dr, counters(dev, 1, owner="router_route"), w, idx, ids, bexp,
        prior, seed, M, E, K, n_blocks, **_route_meta(M, E, S, n_blocks, k, renorm, block_m),
        BLOCK_EG=block_eg, BLOCK_K=block_k, DRAW=draw is not None, PDL=pdl, num_warps=num_warps,
        **({"launch_pdl": True} if pdl else {}))
    return w, idx, ids, bexp
