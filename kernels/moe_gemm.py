"""Mixture-of-experts experts as two grouped GEMMs over tokens sorted by expert (the fused-MoE
layout), with no host synchronisation: a CUDA graph captures the whole layer.

The ``M k`` (token, choice) slots are sorted by expert on the device, each expert's run padded
to a multiple of ``BLOCK_M`` (a static upper bound of blocks, the unused ones marked by an expert
id of ``E``): by ``route_align`` with the routing for a decode step's few slots, else by
``kernels.moe_align``'s counting sort (``align`` here, torch's ops, is its reference).
``_moe_up_kernel`` computes, per block of one expert's slots and ``BLOCK_N`` hidden units, the
gate and up projections of the slots' tokens (``w13 [E, 2 Fe, d]``, gate rows then up rows) and
SwiGLU of them: each expert's weight tile is read once for all its slots.
``_moe_down_kernel`` applies ``w2 [E, d, Fe]`` to the activations and scales each slot by its
routing weight. The ``k`` slots of a token are then summed. Minimum DRAM bytes of a call: the
touched experts' weights, ``3 d Fe`` elements each, plus activations.

``reference`` is the PyTorch computation (``zoo.experts.MoEFeedForward.experts``'s numerics).
The layout follows vLLM's fused_moe (``moe_align_block_size`` then a grouped GEMM), written here
for the zoo's shapes.

A step the fused routing takes (``fused_route``: a decode step's few slots) launches ``moe_up``
and ``moe_down`` (and, at most 8 tokens, ``router_route``) with Hopper's programmatic dependent
launch (``pdl``, as ``kernels.gemv``; ``route_align`` without it): each program waits for the
previous kernel's memory (``gdc_wait``) before its first load and lets the next kernel launch
once its main loop is done, so in a CUDA graph a launch overlaps its predecessor's tail.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import moe_align
from .moe_align import _logits_tile, _topk_rows
from .split_merge import counters

# the decode step's MoE kernels under PDL when the model asks for it (``pdl``; bench.moe_step_probe
# measures the step with it off)
MOE_PDL = True


def align(idx: torch.Tensor, n_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The slots of ``idx [M, k]`` (expert ids, int64) sorted by expert, each expert's run padded
    to a multiple of ``block_m``, on the device (no host sync).

    Returns:
        ``(sorted_ids [n_blocks * block_m] int32, block_expert [n_blocks] int32)``: slot ids
        (``t k + j``; ``M k`` marks padding), and each block's expert (``n_experts`` past the
        last used block). ``n_blocks = cdiv(M k, block_m) + min(n_experts, M k)``.
    """
    S = idx.numel()
    flat = idx.reshape(-1)
    counts = torch.zeros(n_experts, dtype=torch.int64, device=idx.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    ends = padded.cumsum(0)
    order = torch.argsort(flat, stable=True)
    e_sorted = flat[order]
    run_start = counts.cumsum(0) - counts  # where each expert's slots begin in sorted order
    dest = (ends - padded)[e_sorted] + torch.arange(S, device=idx.device) - run_start[e_sorted]
    n_blocks = triton.cdiv(S, block_m) + min(n_experts, S)
    sorted_ids = torch.full((n_blocks * block_m,), S, dtype=torch.int32, device=idx.device)
    sorted_ids[dest] = order.to(torch.int32)
    starts = torch.arange(n_blocks, device=idx.device) * block_m
    block_expert = torch.searchsorted(ends, starts, right=True).to(torch.int32)
    return sorted_ids, block_expert


@triton.jit
def _route_align_kernel(logits_ptr, w_ptr, idx_ptr, ids_ptr, bexp_ptr, prior_ptr, seed_ptr, M, E,
                        n_blocks, TOPK: tl.constexpr, RENORM: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_E: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_B: tl.constexpr,
                        BM: tl.constexpr, DRAW: tl.constexpr):
    _route_align(logits_ptr, w_ptr, idx_ptr, ids_ptr, bexp_ptr, prior_ptr, seed_ptr, M, E,
                 n_blocks, TOPK, RENORM, BLOCK_M, BLOCK_E, BLOCK_S, BLOCK_B, BM, False, DRAW)


@triton.jit
def _route_align(logits_ptr, w_ptr, idx_ptr, ids_ptr, bexp_ptr, prior_ptr, seed_ptr, M, E,
                 n_blocks, TOPK: tl.constexpr, RENORM: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_E: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_B: tl.constexpr,
                 BM: tl.constexpr, CG: tl.constexpr, DRAW: tl.constexpr):
    # one program: softmax over the router's logits [M, E] in float32, the top k (argmax k
    # times), the k weights renormalised (RENORM), then ``align``'s sort of the M k slots by
    # expert, for a decode step's few slots (BLOCK_S >= M k; a slot's place in its expert's
    # run from a running count over a [slots, experts] one-hot); CG: the logits written by
    # other programs of this launch (read past L1); DRAW: the logits are a routing skew's draw,
    # log p_e + Gumbel noise (zoo.experts.MoEFeedForward.logits' arithmetic) from Philox on the
    # layer's counter at seed_ptr, made by the launch before (moe_align.draw_logits) or by the
    # other programs of this one (router_route), and this program advances the counter (a
    # graph replays new draws); drawn here, by one program, the draw cost 3-4x the routing
    rows = tl.arange(0, BLOCK_M)
    x, cols, rmask, _ = _logits_tile(logits_ptr, prior_ptr, seed_ptr, rows, M, E, BLOCK_E,
                                     False, CG)
    if DRAW:
        seed = tl.load(seed_ptr)
        tl.debug_barrier()  # every warp has read the seed before it moves on
        tl.store(seed_ptr, seed + 1)
    _topk_rows(x, rows, rmask, cols, w_ptr, idx_ptr, TOPK, RENORM, BLOCK_M)
    tl.debug_barrier()
    S = M * TOPK
    slots = tl.arange(0, BLOCK_S)
    valid = slots < S
    e = tl.load(idx_ptr + slots, mask=valid, other=E).to(tl.int32)
    bins = tl.arange(0, BLOCK_E)
    onehot = (e[:, None] == bins[None, :]) & valid[:, None]  # [BLOCK_S, BLOCK_E]
    counts = tl.sum(onehot.to(tl.int32), 0)
    padded = (counts + BM - 1) // BM * BM
    ends = tl.cumsum(padded, 0)
    starts = ends - padded
    seen = tl.cumsum(onehot.to(tl.int16), 0)  # per expert, its slots up to and with this one
    dest = tl.sum(tl.where(onehot, starts[None, :] + seen - 1, 0), 1)
    for b0 in range(0, n_blocks * BM, BLOCK_S):  # every position padding first
        offs = b0 + slots
        tl.store(ids_ptr + offs, S, mask=offs < n_blocks * BM)
    tl.debug_barrier()
    tl.store(ids_ptr + dest, slots, mask=valid)
    blocks = tl.arange(0, BLOCK_B)
    done = (ends[None, :] <= (blocks * BM)[:, None]) & (bins[None, :] < E)
    tl.store(bexp_ptr + blocks, tl.sum(done.to(tl.int32), 1), mask=blocks < n_blocks)


# the fused routing and sort (one launch) takes steps up to this many slots and experts, and
# slots x experts (padded to powers of two) up to ROUTE_ALIGN_MAX_CELLS: its running count over
# the [slots, experts] one-hot is scanned in shared memory (512 x 64 int16 fit an H100's 227 KiB)
ROUTE_ALIGN_MAX_SLOTS = 512
ROUTE_ALIGN_MAX_EXPERTS = 256
ROUTE_ALIGN_MAX_CELLS = 32768


def fused_route(slots: int, n_experts: int) -> bool:
    """Whether ``route_align`` takes a step of ``slots`` (token, choice) pairs over
    ``n_experts`` (the limits above)."""
    return (slots <= ROUTE_ALIGN_MAX_SLOTS and n_experts <= ROUTE_ALIGN_MAX_EXPERTS
            and triton.next_power_of_2(max(slots, 16)) * triton.next_power_of_2(max(n_experts, 16))
            <= ROUTE_ALIGN_MAX_CELLS)


def route_align(logits: torch.Tensor, k: int, renorm: bool, block_m: int, dtype: torch.dtype,
                num_warps: int | None = None, draw: tuple | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The router's softmax and top-k and ``align``'s sort in one launch, for ``M k`` up to
    ``ROUTE_ALIGN_MAX_SLOTS`` slots and up to 256 experts.

    Args:
        logits: ``[M, E]`` router logits. k: experts per token. renorm: the k weights over their
            sum. block_m: ``align``'s block. dtype: the weights' dtype. num_warps: the one
            program's; by default 1 for at most 8 slots, else 8 (an H200, 2026-11-28: one
            token's routing over 64 / 128 experts took 3.7 / 4.3 us with one warp against 5.7 /
            6.0 with eight; eight tokens' 6.2 / 8.0 with eight, 8.2 / 43.7 with one;
            ``results/reference/moe_h100.md``).
        draw: ``(log_prior [E] float32, seed [1] int64)``: a routing skew's draw in the
            logits' place (``zoo.routing``; ``_route_align``), made by a launch before this
            one (``moe_align.draw_logits``, a program a token), the seed advanced by one;
            ``logits`` unread (the router's GEMM still ran).

    Returns:
        ``(weights [M, k] dtype, idx [M, k] int64, sorted_ids, block_expert)`` as
        ``torch.topk`` of the softmax and ``align`` give them.

    Raises:
        ValueError: a step past the limits (``fused_route``), named.
    """
    M, E = logits.shape
    S = M * k
    if not fused_route(S, E):
        raise ValueError(f"route_align: {S} slots over {E} experts are past its limits (at most "
                         f"{ROUTE_ALIGN_MAX_SLOTS} slots, {ROUTE_ALIGN_MAX_EXPERTS} experts, "
                         f"{ROUTE_ALIGN_MAX_CELLS} padded cells: fused_route)")
    n_blocks = triton.cdiv(S, block_m) + min(E, S)
    num_warps = num_warps or (1 if S <= 8 else 8)
    dev = logits.device
    w = torch.empty(M, k, device=dev, dtype=dtype)
    idx = torch.empty(M, k, device=dev, dtype=torch.int64)
    ids = torch.empty(n_blocks * block_m, device=dev, dtype=torch.int32)
    bexp = torch.empty(n_blocks, device=dev, dtype=torch.int32)
    prior, seed = draw if draw is not None else (w, idx)  # (unread without a draw)
    if draw is not None:  # drawn over a program a token (moe_align.draw_logits), then routed
        logits = moe_align.draw_logits(prior, seed, M)
    _route_align_kernel[(1,)](logits.contiguous(), w, idx, ids, bexp, prior, seed, M, E, n_blocks,
                              **_route_meta(M, E, S, n_blocks, k, renorm, block_m),
                              DRAW=draw is not None, num_warps=num_warps)
    return w, idx, ids, bexp


def _route_meta(M: int, E: int, S: int, n_blocks: int, k: int, renorm: bool, block_m: int):
    return dict(TOPK=k, RENORM=renorm, BLOCK_M=triton.next_power_of_2(M),
                BLOCK_E=max(16, triton.next_power_of_2(E)), BLOCK_S=max(16, triton.next_power_of_2(S)),
                BLOCK_B=triton.next_power_of_2(n_blocks), BM=block_m)


@triton.jit
def _moe_up_kernel(x_ptr, w_ptr, out_ptr, ids_ptr, bexp_ptr, S, K, F, E,
                   TOPK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, PREC: tl.constexpr, PDL: tl.constexpr = False):
    if PDL:  # the routing's memory before the first load (the module doc)
        tl.extra.cuda.gdc_wait()
    pid_m = tl.program_id(0)
    e = tl.load(bexp_ptr + pid_m)
    if e < E:
        ids = tl.load(ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
        valid = ids < S
        tok = (ids // TOPK).to(tl.int64)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = offs_n < F
        w = w_ptr + e.to(tl.int64) * 2 * F * K
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            kmask = offs_k < K
            a = tl.load(x_ptr + tok[:, None] * K + offs_k[None, :],
                        mask=valid[:, None] & kmask[None, :], other=0.0)
            wmask = nmask[None, :] & kmask[:, None]
            bg = tl.load(w + offs_n[None, :] * K + offs_k[:, None], mask=wmask, other=0.0)
            bu = tl.load(w + (F + offs_n)[None, :] * K + offs_k[:, None], mask=wmask, other=0.0)
            acc_g = tl.dot(a, bg, acc_g, input_precision=PREC)
            acc_u = tl.dot(a, bu, acc_u, input_precision=PREC)
        if PDL:  # the weights are read: the next kernel may launch
            tl.extra.cuda.gdc_launch_dependents()
        dt = out_ptr.dtype.element_ty
        gate = acc_g.to(dt).to(tl.float32)  # rounded as torch rounds the GEMM's output
        act = (gate * tl.sigmoid(gate)).to(dt).to(tl.float32) * acc_u.to(dt).to(tl.float32)
        tl.store(out_ptr + ids.to(tl.int64)[:, None] * F + offs_n[None, :], act.to(dt),
                 mask=valid[:, None] & nmask[None, :])


@triton.jit
def _moe_down_kernel(a_ptr, w_ptr, out_ptr, ids_ptr, bexp_ptr, rw_ptr, sum_ptr, cnt_ptr, S, K,
                     N, E, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     PREC: tl.constexpr, SUM: tl.constexpr = False, TOPK: tl.constexpr = 1,
                     BLOCK_J: tl.constexpr = 1, PDL: tl.constexpr = False):
    if PDL:
        tl.extra.cuda.gdc_wait()
    pid_m = tl.program_id(0)
    e = tl.load(bexp_ptr + pid_m)
    if e < E:
        ids = tl.load(ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
        valid = ids < S
        rows = ids.to(tl.int64)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = offs_n < N
        w = w_ptr + e.to(tl.int64) * N * K
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            kmask = offs_k < K
            a = tl.load(a_ptr + rows[:, None] * K + offs_k[None, :],
                        mask=valid[:, None] & kmask[None, :], other=0.0)
            b = tl.load(w + offs_n[None, :] * K + offs_k[:, None],
                        mask=nmask[None, :] & kmask[:, None], other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PREC)
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        dt = out_ptr.dtype.element_ty
        rw = tl.load(rw_ptr + rows, mask=valid, other=0.0).to(tl.float32)
        y = acc.to(dt).to(tl.float32) * rw[:, None]
        tl.store(out_ptr + rows[:, None] * N + offs_n[None, :], y.to(dt),
                 mask=valid[:, None] & nmask[None, :])
        if SUM:  # the program holding a token's last slot (per column tile) sums its k slots
            tl.debug_barrier()  # every thread's slot rows before the counts
            n_nt = tl.num_programs(1)
            tok = (ids // TOPK).to(tl.int64)
            cnt = cnt_ptr + tok * n_nt + tl.program_id(1)
            last = valid & (tl.atomic_add(cnt, 1, mask=valid, sem="acq_rel") == TOPK - 1)
            tl.debug_barrier()
            j = tl.arange(0, BLOCK_J)
            m3 = last[:, None, None] & (j < TOPK)[None, :, None] & nmask[None, None, :]
            v = tl.load(out_ptr + (tok[:, None] * TOPK + j[None, :])[:, :, None] * N
                        + offs_n[None, None, :], mask=m3, other=0.0, cache_modifier=".cg")
            tl.store(sum_ptr + tok[:, None] * N + offs_n[None, :],
                     tl.sum(v.to(tl.float32), axis=1).to(dt), mask=last[:, None] & nmask[None, :])
            tl.store(cnt, 0, mask=last)


# the model sums a token's slots inside ``moe_down``'s launch (``sum_k``) for a step of at most
# this many tokens: measured faster at 1 and 8 (``results/reference/moe_h100.md``, 2026-11-28:
# -3.2 and -1.0 us a layer on an H200); its mirror ``zoo.moe.SUM_IN_DOWN_MAX_TOKENS``
SUM_IN_DOWN_MAX_TOKENS = 8


def sum_in_down(tokens: int, n_experts: int, k: int) -> bool:
    """Whether the model sums a step's slots inside ``moe_down``'s launch: at most
    ``SUM_IN_DOWN_MAX_TOKENS`` tokens, routed by ``route_align`` (``fused_route``)."""
    return tokens <= SUM_IN_DOWN_MAX_TOKENS and fused_route(tokens * k, n_experts)


def tiles(slots: int, n_experts: int) -> tuple[int, int, int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)`` for ``slots`` routed (token, expert) pairs
    over ``n_experts`` experts, one tuple for both GEMMs (they share the alignment's block): 16
    rows up to 1024 slots (a decode step, where an expert gets one or a few of its tokens; a
    short prompt too), then 64 while an expert's mean share is under 128 slots, 128 above (a
    prefill). Chosen on the H100 by
    ``bench/moe_tiles_probe.py`` (``results/reference/moe_tiles_probe_h100.md``): at 4096 and
    16384 tokens of Qwen3-30B-A3B's and Mixtral-8x7B's layers, ``BLOCK_M`` 128 took 0.80-0.85x the
    time of 64 (up GEMM) and 0.70-1.00x (down); at 8 and 64 tokens 16 and 32 were within 4%."""
    if slots <= 1024:
        return (16, 64, 128, 4, 3)
    per_expert = slots / max(1, n_experts)
    return (64, 128, 64, 4, 3) if per_expert < 128 else (128, 128, 64, 8, 3)


def moe_up(h: torch.Tensor, w13: torch.Tensor, k: int, aligned: tuple, tile: tuple,
           pdl: bool = False) -> torch.Tensor:
    """The first grouped GEMM with SwiGLU: ``act [M k, Fe]`` (slot ``t k + j``'s activation) of
    tokens ``h [M, d]`` (contiguous) through ``w13 [E, 2 Fe, d]``, over ``aligned``
    (``(sorted_ids, block_expert)`` of ``align`` / ``route_align`` with ``tile``'s block); one
    launch. ``tile``: ``tiles``' tuple. ``pdl``: launched with programmatic dependent launch
    (``launch_pdl``, the module doc)."""
    M, d = h.shape
    E, F = w13.shape[0], w13.shape[1] // 2
    bm, bn, bk, warps, stages = tile
    sorted_ids, bexp = aligned
    act = torch.empty(M * k, F, device=h.device, dtype=h.dtype)
    pdl = _pdl(pdl, h)
    _moe_up_kernel[(bexp.numel(), triton.cdiv(F, bn))](
        h, w13, act, sorted_ids, bexp, M * k, d, F, E, TOPK=k, BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_K=bk, PREC=_prec(h), PDL=pdl, num_warps=warps, num_stages=stages,
        **({"launch_pdl": True} if pdl else {}))
    return act


def moe_down(act: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor, aligned: tuple,
             tile: tuple, sum_k: int = 0, pdl: bool = False) -> torch.Tensor:
    """The second grouped GEMM: ``y [S, d]`` = each slot's activation ``act [S, Fe]`` through its
    expert's ``w2 [E, d, Fe]``, scaled by its routing weight (``weights``, ``S`` of them); one
    launch. ``aligned`` and ``tile`` as ``moe_up``. With ``sum_k`` (the slots per token, ``k``):
    the tokens' sums ``[S / k, d]`` instead, in the same launch (the program that finishes a
    token's last slot of a column tile, counted on a per-(token, tile) counter, adds its ``k``
    slot rows), in place of the slots' sum as a kernel of its own. ``pdl``: as ``moe_up``."""
    (S, F), (E, d) = act.shape, w2.shape[:2]
    bm, bn, bk, warps, stages = tile
    sorted_ids, bexp = aligned
    y = torch.empty(S, d, device=act.device, dtype=act.dtype)
    n_nt = triton.cdiv(d, bn)
    out = torch.empty(S // sum_k, d, device=act.device, dtype=act.dtype) if sum_k else y
    cnt = counters(act.device, S // sum_k * n_nt, owner="moe_down_sum") if sum_k else bexp
    pdl = _pdl(pdl, act)
    _moe_down_kernel[(bexp.numel(), n_nt)](
        act, w2, y, sorted_ids, bexp, weights.reshape(-1).contiguous(), out, cnt, S, F, d, E,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PREC=_prec(act), SUM=bool(sum_k),
        TOPK=max(sum_k, 1), BLOCK_J=triton.next_power_of_2(max(sum_k, 1)), PDL=pdl,
        num_warps=warps, num_stages=stages, **({"launch_pdl": True} if pdl else {}))
    return out


def _prec(x: torch.Tensor) -> str:
    return "ieee" if x.dtype == torch.float32 else "tf32"  # float32: exact products (tests)


def _pdl(pdl: bool, x: torch.Tensor) -> bool:
    # the caller's pdl (the model's: kernels.gemv.pdl_supported, switches.pdl), under MOE_PDL;
    # never in the interpreter
    return bool(pdl and MOE_PDL and x.device.type == "cuda")


def moe_experts(h: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
                idx: torch.Tensor, aligned: tuple | None = None, tile: tuple | None = None,
                sum_in_down: bool = False, pdl: bool = False) -> torch.Tensor:
    """The routed experts' weighted sum (see the module doc): ``moe_up`` then ``moe_down``, the
    ``k`` slots of each token summed.

    Args:
        h: ``[M, d]`` tokens (contiguous). w13: ``[E, 2 Fe, d]`` (gate rows, then up rows).
        w2: ``[E, d, Fe]``. weights: ``[M, k]`` routing weights. idx: ``[M, k]`` int64 experts.
        aligned: ``(sorted_ids, block_expert)`` made already (``route_align``, with
            ``tiles(M k, E)``'s block), else ``kernels.moe_align.align`` makes them (the
            counting sort; ``align`` here is its reference). tile: ``tiles``' tuple to use
            instead of its choice (``bench/moe_probe.py``'s sweep). sum_in_down: the slots'
            sum in ``moe_down``'s launch (``sum_k``), not a kernel of its own. pdl: both
            GEMMs launched with programmatic dependent launch (the module doc).

    Returns:
        ``[M, d]`` in ``h``'s dtype.
    """
    M, d = h.shape
    k = idx.shape[1]
    tile = tile or tiles(M * k, w13.shape[0])
    aligned = aligned if aligned is not None else moe_align.align(idx, w13.shape[0], tile[0])
    act = moe_up(h.contiguous(), w13, k, aligned, tile, pdl=pdl)
    if sum_in_down:
        return moe_down(act, w2, weights, aligned, tile, sum_k=k, pdl=pdl)
    return moe_down(act, w2, weights, aligned, tile, pdl=pdl).view(M, k, d).sum(1)


def reference(h: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
              idx: torch.Tensor) -> torch.Tensor:
    """PyTorch reference: each token's ``k`` experts applied one by one (SwiGLU, ``w2``), scaled
    by their weights and summed. Shapes as ``moe_experts``."""
    out = torch.zeros_like(h)
    for j in range(idx.shape[1]):
        g, u = torch.einsum("md,mfd->mf", h, w13[idx[:, j]]).chunk(2, dim=-1)
        y = torch.einsum("mf,mdf->md", torch.nn.functional.silu(g) * u, w2[idx[:, j]])
        out += y * weights[:, j, None]
    return out
