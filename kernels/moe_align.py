"""A long prompt's MoE routing on the device: its rows' top-k in one launch, its slots sorted by
expert in two (a counting sort).

``kernels.moe_gemm.align`` (the reference) sorts the ``M k`` (token, choice) slots by expert with
torch's ops: about 25 launches, among them a radix sort. The fused routing (``route_align``)
takes only a decode step's few slots. On an H200 (2026-11-28, ``results/reference/moe_h100.md``,
fifteenth session) a long prompt's routing and sort in torch's ops cost Qwen3-30B-A3B's prefill of
512 tokens (4096 slots over 128 experts, each token's experts drawn uniformly) about 100 us a
layer: the sort 34 us, the gathers 14, the slots' sum 10, ``torch.topk``'s two kernels 7 + 5, the
softmax, renormalisation and casts a few each. ``route_rows`` is one launch over blocks of rows
with ``route_align``'s numerics (``_topk_rows``, shared), a routing skew drawn in it; with the
counting sort below, the same prompt's routing and sort took 10.1 + 7.9 + 5.1 us a layer
(sixteenth session). Then:

1. ``_count_kernel``: programs of ``BLOCK`` slots add their slots per expert to the experts'
   counts (a histogram, then one atomic an expert) and mark their share of the positions as
   padding. The last program to finish runs the
   count's prefix sum, over each expert's run padded to a multiple of ``block_m``. It writes
   each block's expert, sets each expert's cursor to where its run starts (a buffer of its
   own), and zeroes the counts. It knows it is last from an acq_rel counter, which it resets:
   CUDA's grid-sync pattern, as ``kernels.split_merge`` merges.
2. ``_place_kernel``: programs of slots reserve their places in each expert's run (one atomic
   an expert on its cursor); each slot takes the place of its rank among them and writes its
   id there.

Inside an expert's run the programs' slots come in the order of their atomics, not the
reference's stable order. The grouped GEMMs compute each slot's row on its own, so their output
does not depend on that order. Atomics are one an expert a program, so a concentrated routing
(the random router sends a fifth of a long prompt's slots to one expert) does not serialise one
a slot on its expert's address.
Minimum DRAM traffic: the expert ids, read twice (8 bytes a slot each time), every padded
position marked (4 bytes) and each slot's id written (4 bytes).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .split_merge import counters

# route_rows takes a router of at most this many experts (its [rows, experts] tile in
# registers; the zoo's mirror zoo.moe.ROUTE_ROWS_MAX_EXPERTS, held equal by a test)
ROUTE_ROWS_MAX_EXPERTS = 256
ROUTE_ROWS_CELLS = 4096  # rows x experts (padded) a program takes at most
ROUTE_ROWS_PROGRAMS = 128  # route_rows splits a prompt's rows over about this many programs
BLOCK = 1024  # slots a program takes
FILL = 1024  # positions a program marks as padding per loop step
BLOCK_C = 32  # blocks whose expert the last program finds per loop step
PLACE_CELLS = 16384  # slots x experts (padded) of a placing program's one-hot


@triton.jit
def _drawn_logits(prior_ptr, seed, rows, cols, lmask, E):
    # a routing skew's draw in the logits' place: log p_e + Gumbel noise [rows, experts] in
    # float32 (zoo.experts.MoEFeedForward.logits' arithmetic), Philox at (seed, row E + expert);
    # -inf past the experts and rows (lmask)
    u = tl.maximum(tl.rand(seed, rows[:, None] * E + cols[None, :]), 1e-20)
    prior = tl.load(prior_ptr + cols, mask=cols < E, other=0.0)
    return tl.where(lmask, prior[None, :] - tl.log(-tl.log(u)), float("-inf"))


@triton.jit
def _draw_kernel(prior_ptr, seed_ptr, out_ptr, M, E, BLOCK_E: tl.constexpr):
    # program p: row p's draw (_drawn_logits, float32) into out [M, E]; the seed read, not
    # advanced (the routing launch after it advances it)
    rows = tl.program_id(0) + tl.arange(0, 1)
    cols = tl.arange(0, BLOCK_E)
    lmask = (rows < M)[:, None] & (cols < E)[None, :]
    seed = tl.load(seed_ptr)
    tl.store(out_ptr + rows[:, None] * E + cols[None, :],
             _drawn_logits(prior_ptr, seed, rows, cols, lmask, E), mask=lmask)


def draw_logits(prior: torch.Tensor, seed: torch.Tensor, M: int) -> torch.Tensor:
    """A routing skew's draw for ``M`` tokens, ``[M, E]`` float32, one program a token: the
    numbers ``route_rows`` and ``kernels.moe_route.router_route`` draw in their own programs
    (Philox at ``(seed, row E + expert)``), for ``kernels.moe_gemm.route_align``, whose one
    program drew them itself 3-4x slower than it routes (an H200, 2026-11-28: 64 tokens over
    64 experts 91.9 us against 29.0 without a draw; ``results/reference/moe_h100.md``).
    prior: ``[E]`` float32 log prior; seed: ``[1]`` int64, read, not advanced."""
    E = prior.shape[0]
    out = torch.empty(M, E, device=prior.device, dtype=torch.float32)
    _draw_kernel[(M,)](prior, seed, out, M, E, BLOCK_E=max(16, triton.next_power_of_2(E)),
                       num_warps=1)
    return out


@triton.jit
def _logits_tile(logits_ptr, prior_ptr, seed_ptr, rows, M, E, BLOCK_E: tl.constexpr,
                 DRAW: tl.constexpr, CG: tl.constexpr):
    # the router's logits of ``rows`` as a float32 [rows, BLOCK_E] tile (-inf past the
    # experts), or under DRAW a routing skew's draw in their place (_drawn_logits, at the seed
    # read here; the caller advances it once every warp has read it); CG: logits written by
    # other programs of this launch (read past L1). Returns (x, cols, rmask, seed)
    cols = tl.arange(0, BLOCK_E)
    rmask = rows < M
    lmask = rmask[:, None] & (cols[None, :] < E)
    offs = rows[:, None].to(tl.int64) * E + cols[None, :]
    seed = 0
    if DRAW:
        seed = tl.load(seed_ptr)
        x = _drawn_logits(prior_ptr, seed, rows, cols, lmask, E)
    elif CG:
        x = tl.load(logits_ptr + offs, mask=lmask, other=float("-inf"),
                    cache_modifier=".cg").to(tl.float32)
    else:
        x = tl.load(logits_ptr + offs, mask=lmask, other=float("-inf")).to(tl.float32)
    return x, cols, rmask, seed


@triton.jit
def _topk_rows(x, rows, rmask, cols, w_ptr, idx_ptr, TOPK: tl.constexpr, RENORM: tl.constexpr,
               BLOCK_M: tl.constexpr):
    # softmax over the logits x [BLOCK_M, BLOCK_E] (float32, -inf past the experts) in float32,
    # the top k (torch.topk's choice: the largest, ties to the lowest expert), the k weights
    # renormalised (RENORM: each over the sum of the k in the order picked); weights [M, k] and
    # expert ids [M, k] int64 stored for the rows in rmask
    x = tl.where(rmask[:, None], x, 0.0)  # rows past M: no NaN (never stored)
    x = x - tl.max(x, 1)[:, None]
    p = tl.exp(x)
    p = p / tl.sum(p, 1)[:, None]
    if BLOCK_M == 1:
        _topk_one_row(p, rows, rmask, cols, w_ptr, idx_ptr, TOPK, RENORM)
    else:
        total = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)
        if RENORM:  # the top k's sum first (the same choices as below): one divide a weight
            q = p
            total = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for _ in tl.static_range(TOPK):
                total += tl.max(q, 1)
                q = tl.where(cols[None, :] == tl.argmax(q, 1)[:, None], -1.0, q)
        for j in tl.static_range(TOPK):
            best = tl.max(p, 1)
            arg = tl.argmax(p, 1)
            tl.store(idx_ptr + rows * TOPK + j, arg.to(tl.int64), mask=rmask)
            tl.store(w_ptr + rows * TOPK + j, (best / total).to(w_ptr.dtype.element_ty),
                     mask=rmask)
            p = tl.where(cols[None, :] == arg[:, None], -1.0, p)


@triton.jit
def _topk_one_row(p, rows, rmask, cols, w_ptr, idx_ptr, TOPK: tl.constexpr,
                  RENORM: tl.constexpr):
    # _topk_rows' picks for a tile of one row, the same choices and weights with one reduction
    # a pick: a probability (>= 0: its order is its bits') packed above its column's complement,
    # whose max is the value and the lowest column holding it; under RENORM the weights stored
    # after the k picks, from the tile (a pick's column marked with its rank). Measured on an
    # H200 (2026-11-28, results/reference/moe_h100.md): OLMoE-1B-7B's and Qwen3-30B-A3B's
    # batch-1 steps 0.6-0.7% and 0.8% shorter in two runs; taken by every tile, it made 8 to
    # 64 rows 1-7 us slower (the packed max, the tile's store), so more rows keep two passes
    low = (2147483647 - cols)[None, :].to(tl.int64)  # 31 bits, decreasing in the column
    key = (p.to(tl.int32, bitcast=True).to(tl.int64) << 32) | low
    total = tl.zeros(rows.shape, dtype=tl.float32)
    rank = tl.full(p.shape, -1, tl.int32)
    for j in tl.static_range(TOPK):
        packed = tl.max(key, 1)
        arg = 2147483647 - (packed & 2147483647)
        best = (packed >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        hit = cols[None, :] == arg[:, None]
        tl.store(idx_ptr + rows * TOPK + j, arg, mask=rmask)
        if RENORM:
            total += best
            rank = tl.where(hit, j, rank)
        else:
            tl.store(w_ptr + rows * TOPK + j, best.to(w_ptr.dtype.element_ty), mask=rmask)
        key = tl.where(hit, -1, key)
    if RENORM:
        w = (p / total[:, None]).to(w_ptr.dtype.element_ty)
        tl.store(w_ptr + rows[:, None] * TOPK + rank, w, mask=rmask[:, None] & (rank >= 0))


@triton.jit
def _route_rows_kernel(logits_ptr, w_ptr, idx_ptr, prior_ptr, seed_ptr, cnt_ptr, M, E,
                       TOPK: tl.constexpr, RENORM: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_E: tl.constexpr, DRAW: tl.constexpr):
    # program p: rows [p BLOCK_M, (p + 1) BLOCK_M) routed (_topk_rows); DRAW: the skew's draw in
    # the logits' place, and the last program to finish (an acq_rel counter, reset by it)
    # advances the layer's seed, once every program has read it
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    x, cols, rmask, seed = _logits_tile(logits_ptr, prior_ptr, seed_ptr, rows, M, E, BLOCK_E,
                                        DRAW, False)
    _topk_rows(x, rows, rmask, cols, w_ptr, idx_ptr, TOPK, RENORM, BLOCK_M)
    if DRAW:
        tl.debug_barrier()
        if tl.atomic_add(cnt_ptr, 1, sem="acq_rel") == tl.num_programs(0) - 1:
            tl.store(cnt_ptr, 0)
            tl.store(seed_ptr, seed + 1)


def route_rows(logits: torch.Tensor, k: int, renorm: bool, dtype: torch.dtype,
               draw: tuple | None = None, block_m: int | None = None,
               num_warps: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """The router's softmax and top ``k`` for a long prompt's rows in one launch (programs over
    blocks of rows; ``route_align``'s numerics, which take a decode step's few slots together
    with their sort): ``torch.topk`` of the float32 softmax, renormalised with ``renorm``.

    Args:
        logits: ``[M, E]`` router logits, ``E <= ROUTE_ROWS_MAX_EXPERTS``. k: experts per
            token. renorm: the k weights over their sum. dtype: the weights'. draw:
            ``(log_prior [E] float32, seed [1] int64)``: a routing skew's draw in the logits'
            place (``kernels.moe_gemm.route_align``'s), the seed advanced by one; ``logits``
            unread.
        block_m, num_warps: the tile (``bench.moe_route_rows_probe``'s sweep); by default
            ``route_rows_block``'s rows a program, 4 warps.

    Returns:
        ``(weights [M, k] dtype, idx [M, k] int64)``.

    Raises:
        ValueError: more experts than ``ROUTE_ROWS_MAX_EXPERTS``.
    """
    M, E = logits.shape
    if E > ROUTE_ROWS_MAX_EXPERTS:
        raise ValueError(f"route_rows: {E} experts, more than {ROUTE_ROWS_MAX_EXPERTS}")
    block_e = max(16, triton.next_power_of_2(E))
    block_m = block_m or route_rows_block(M, E)
    dev = logits.device
    w = torch.empty(M, k, device=dev, dtype=dtype)
    idx = torch.empty(M, k, device=dev, dtype=torch.int64)
    prior, seed = draw if draw is not None else (w, idx)  # (unread without a draw)
    _route_rows_kernel[(triton.cdiv(M, block_m),)](
        logits.contiguous(), w, idx, prior, seed, counters(dev, 1, owner="route_rows"), M, E,
        TOPK=k, RENORM=renorm, BLOCK_M=block_m, BLOCK_E=block_e, DRAW=draw is not None,
        num_warps=num_warps)
    return w, idx


def route_rows_block(M: int, E: int) -> int:
    """The rows a ``route_rows`` program takes: a power of two spreading ``M`` rows over about
    ``ROUTE_ROWS_PROGRAMS`` programs, at most ``ROUTE_ROWS_CELLS`` cells (rows x padded experts)
    a program. (Up to 2026-11-28 a program took the most cells: 16 programs for a 512-token
    prompt of Qwen3-30B-A3B's router, whose draw under a routing skew then cost 104 us a layer
    on an H200, ``results/reference/moe_h100.md``.)"""
    block_e = max(16, triton.next_power_of_2(E))
    spread = triton.next_power_of_2(triton.cdiv(M, ROUTE_ROWS_PROGRAMS))
    return max(1, min(spread, ROUTE_ROWS_CELLS // block_e))


@triton.jit
def _count_kernel(idx_ptr, ws_ptr, cur_ptr, ids_ptr, bexp_ptr, S, E, n_blocks, BM,
                  BLOCK: tl.constexpr, BLOCK_E: tl.constexpr, FILL: tl.constexpr,
                  BLOCK_C: tl.constexpr):
    # ws: [0] the programs-done counter, [1, 1 + E) the counts (both left zeroed); cur: [E] the
    # experts' cursors (set here before _place_kernel moves them)
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < S
    e = tl.load(idx_ptr + offs, mask=m, other=0).to(tl.int32)
    bins = tl.arange(0, BLOCK_E)
    bmask = bins < E
    hist = tl.histogram(e, BLOCK_E)  # this program's slots per expert (one atomic an expert)
    hist -= tl.where(bins == 0, BLOCK - tl.sum(m.to(tl.int32), 0), 0)  # the masked, as expert 0
    tl.atomic_add(ws_ptr + 1 + bins, hist, mask=bmask & (hist > 0), sem="relaxed")
    total = n_blocks * BM  # every position padding first, each program its share (the places
    share = tl.cdiv(total, tl.num_programs(0))  # are written by the next launch)
    for p0 in range(pid * share, tl.minimum((pid + 1) * share, total), FILL):
        pos = p0 + tl.arange(0, FILL)
        tl.store(ids_ptr + pos, S, mask=(pos < (pid + 1) * share) & (pos < total))
    tl.debug_barrier()  # every thread's adds before the count (CUDA's grid-sync pattern)
    if tl.atomic_add(ws_ptr, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        tl.debug_barrier()
        tl.store(ws_ptr, 0)
        counts = tl.load(ws_ptr + 1 + bins, mask=bmask, other=0, cache_modifier=".cg")
        padded = (counts + BM - 1) // BM * BM
        ends = tl.cumsum(padded, 0)
        tl.store(cur_ptr + bins, ends - padded, mask=bmask)  # each run's first place
        tl.store(ws_ptr + 1 + bins, 0, mask=bmask)  # the counts left zeroed for the next call
        for b0 in range(0, n_blocks, BLOCK_C):  # a block's expert: the runs ended at its start
            blocks = b0 + tl.arange(0, BLOCK_C)
            done = (ends[None, :] <= (blocks * BM)[:, None]) & bmask[None, :]
            tl.store(bexp_ptr + blocks, tl.sum(done.to(tl.int32), 1), mask=blocks < n_blocks)


@triton.jit
def _place_kernel(idx_ptr, cur_ptr, ids_ptr, S, E, BLOCK_P: tl.constexpr, BLOCK_E: tl.constexpr):
    # program p: its BLOCK_P slots take places in their experts' runs: one atomic an expert on
    # the cursors reserves the program's places, a slot's rank among the program's slots of its
    # expert (a running count over a [slots, experts] one-hot, as route_align's) picks one
    offs = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    m = offs < S
    e = tl.load(idx_ptr + offs, mask=m, other=E).to(tl.int32)  # masked: no expert's
    bins = tl.arange(0, BLOCK_E)
    onehot = e[:, None] == bins[None, :]
    counts = tl.sum(onehot.to(tl.int32), 0)
    base = tl.atomic_add(cur_ptr + bins, counts, mask=(bins < E) & (counts > 0), sem="relaxed")
    seen = tl.cumsum(onehot.to(tl.int16), 0)
    place = tl.sum(tl.where(onehot, base[None, :] + seen - 1, 0), 1)
    tl.store(ids_ptr + place, offs.to(tl.int32), mask=m)


def align(idx: torch.Tensor, n_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``kernels.moe_gemm.align`` in two launches (the module doc): the slots of ``idx [M, k]``
    (expert ids, int64) sorted by expert, each expert's run padded to a multiple of ``block_m``,
    on the device with no host sync (a CUDA graph captures it).

    Returns:
        ``(sorted_ids [n_blocks * block_m] int32, block_expert [n_blocks] int32)``, as the
        reference gives them, except the order of the slots inside an expert's run.
    """
    S = idx.numel()
    E = n_experts
    flat = idx.reshape(-1).contiguous()
    n_blocks = triton.cdiv(S, block_m) + min(E, S)
    dev = idx.device
    ids = torch.empty(n_blocks * block_m, device=dev, dtype=torch.int32)
    bexp = torch.empty(n_blocks, device=dev, dtype=torch.int32)
    ws = counters(dev, 1 + E, owner="moe_align")
    cur = counters(dev, E, owner="moe_align_cursors")  # set by each call before use
    block_e = max(16, triton.next_power_of_2(E))
    _count_kernel[(triton.cdiv(S, BLOCK),)](flat, ws, cur, ids, bexp, S, E, n_blocks, block_m,
                                            BLOCK=BLOCK, BLOCK_E=block_e, FILL=FILL,
                                            BLOCK_C=BLOCK_C)
    block_p = max(16, PLACE_CELLS // block_e)
    _place_kernel[(triton.cdiv(S, block_p),)](flat, cur, ids, S, E, BLOCK_P=block_p,
                                              BLOCK_E=block_e)
    return ids, bexp
