"""Multi-head latent attention's decode step in the absorbed form, in one Triton kernel and the
split merge (DeepSeek-V2, Sec. 2.1.2; FlashMLA's layout): every query head of a sequence scores
the cached latents and rotated keys, and sums the latents, reading them once for all heads.

Per sequence the cache holds ``S`` latents ``c [S, r]`` (``kv_lora_rank``, RMS-normed) and rotated
keys ``k_pe [S, R]`` (``qk_rope_head_dim``). A head's absorbed query ``q_lat = q_nope W_UK [r]`` and
its rotated ``q_pe [R]`` score position ``j`` as ``q_lat . c_j + q_pe . k_pe_j``; the output latent
is ``o_lat = sum_j p_j c_j`` (``W_UV`` is applied after, outside). A program takes ``BLOCK_H`` heads
of one sequence over one split of the positions: the scores are a ``[BLOCK_H, r] x [r, BLOCK_N]``
product, so a tile of latents feeds all its heads (heads are the rows of the tensor-core products,
as in FlashMLA). The splits aim at one program per SM (``PER_SM``), each at least ``MIN_TILES``
tiles of positions, so the partial outputs (``H r`` a split, in the latents' dtype: each is
normalised by its own sum before it is stored) stay small beside the latents they replace. The
splits are merged by their log-sum-exp in a kernel of its own (``_mla_merge_kernel``), one
program per (sequence, head, ``MERGE_CHUNK`` channels): a head's partials are ``n_splits x r``
values, too many for one program's registers at ``r = 512``
(``kernels.split_merge.merge_kernel`` holds a head's whole tile in one program; the times of both on
the H100 are in ``results/reference/mla_ncu_h100.md``).
The new position is read from a device tensor: a CUDA graph replays the step.

``zoo.mla_attention.MLAttention.absorbed`` is the PyTorch reference
(``tests/kernels/test_mla_decode.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_attention import _interpreted, _n_sm
from .split_merge import plan_splits

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
MIN_TILES = 4  # a split's positions: at least this many BLOCK_N tiles
MERGE_CHUNK = 64  # channels of the output latent per merge program
MERGE_SPLITS = 32  # splits the merge reads per step of its loop
# up to this many splits the merge loads them all at once (one round trip; ``[splits, CHUNK]``
# float32 in a program's registers): at batch 1 the kernels' time is mostly such fixed costs
# (H100, 16 heads, 32k positions: 8 tiles a split 24 us, 64 tiles at batch 8 110 us)
MERGE_ONE_PASS = 128


@triton.jit
def _mla_split_kernel(ql_ptr, qp_ptr, lat_ptr, kpe_ptr, pos_ptr, o_ptr, lse_ptr,
                      H, r, R, split_len, qk_scale,
                      s_qlb, s_qlh, s_qpb, s_qph, s_lb, s_ls, s_kb, s_ks,
                      BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
                      BLOCK_RP: tl.constexpr, UPCAST: tl.constexpr, PREC: tl.constexpr,
                      SWAP: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # programmatic dependent launch: wait for the previous kernel's writes first
        tl.extra.cuda.gdc_wait()
    b = tl.program_id(0)
    hb = tl.program_id(1)
    sp = tl.program_id(2)
    n_splits = tl.num_programs(2)
    kv_len = tl.load(pos_ptr).to(tl.int32) + 1
    start = sp * split_len
    end = tl.minimum(start + split_len, kv_len)
    heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < H
    offs_r = tl.arange(0, BLOCK_R)
    rmask = offs_r < r
    offs_p = tl.arange(0, BLOCK_RP)
    pmask = offs_p < R
    b64 = b.to(tl.int64)
    q = tl.load(ql_ptr + b64 * s_qlb + heads[:, None] * s_qlh + offs_r[None, :],
                mask=hmask[:, None] & rmask[None, :], other=0.0)
    qp = tl.load(qp_ptr + b64 * s_qpb + heads[:, None] * s_qph + offs_p[None, :],
                 mask=hmask[:, None] & pmask[None, :], other=0.0)
    if UPCAST:  # the interpreter's 16-bit tl.dot is wrong (triton 3.9): float32 there
        q = q.to(tl.float32)
        qp = qp.to(tl.float32)
    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    if SWAP:  # the products transposed: positions (then latent channels) the rows
        acc_t = tl.zeros((BLOCK_R, BLOCK_H), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_H, BLOCK_R), dtype=tl.float32)
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        nmask = offs_n < end
        c = tl.load(lat_ptr + b64 * s_lb + offs_n[:, None] * s_ls + offs_r[None, :],
                    mask=nmask[:, None] & rmask[None, :], other=0.0)  # [BLOCK_N, BLOCK_R]
        kp = tl.load(kpe_ptr + b64 * s_kb + offs_n[:, None] * s_ks + offs_p[None, :],
                     mask=nmask[:, None] & pmask[None, :], other=0.0)  # [BLOCK_N, BLOCK_RP]
        if UPCAST:
            c = c.to(tl.float32)
            kp = kp.to(tl.float32)
        if SWAP:  # s^T [BLOCK_N, BLOCK_H]: the tile's positions fill the tensor core's M
            s = tl.dot(c, tl.trans(q), input_precision=PREC)
            s = tl.dot(kp, tl.trans(qp), s, input_precision=PREC) * qk_scale  # log2 units
            s = tl.where(nmask[:, None], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 0))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_use)
            p = tl.exp2(s - m_use[None, :])
            l_i = l_i * alpha + tl.sum(p, 0)
            acc_t = acc_t * alpha[None, :] + tl.dot(tl.trans(c), p.to(c.dtype),
                                                    input_precision=PREC)
        else:
            s = tl.dot(q, tl.trans(c), input_precision=PREC)
            s = tl.dot(qp, tl.trans(kp), s, input_precision=PREC) * qk_scale  # log2 units
            s = tl.where(nmask[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_use)
            p = tl.exp2(s - m_use[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c, input_precision=PREC)
        m_i = m_new
    if SWAP:
        acc = tl.trans(acc_t)
    o = acc / tl.maximum(l_i, 1e-30)[:, None]  # an empty split: o 0, lse -inf (no weight)
    lse = tl.where(l_i > 0, (m_i + tl.log2(tl.maximum(l_i, 1e-30))) * 0.6931471805599453,
                   float("-inf"))
    row = (b64 * H + heads) * n_splits + sp
    tl.store(o_ptr + row[:, None] * BLOCK_R + offs_r[None, :], o.to(o_ptr.dtype.element_ty),
             mask=hmask[:, None])
    tl.store(lse_ptr + row, lse, mask=hmask)


@triton.jit
def _mla_merge_kernel(o_ptr, lse_ptr, out_ptr, n_splits, r, BLOCK_R: tl.constexpr,
                      CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, ONE_PASS: tl.constexpr,
                      PDL: tl.constexpr):
    """``out[bh, chunk] = sum_s o_s exp(lse_s - m) / sum_s exp(lse_s - m)`` over the splits:
    with ``ONE_PASS`` (all splits in one ``BLOCK_S`` block) the lse and the partials loaded at
    once, one round trip to memory; else ``BLOCK_S`` splits at a time in two passes (the max of
    the lse, then the weighted sum)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    bh = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    dmask = offs_d < r
    if ONE_PASS:
        offs_s = tl.arange(0, BLOCK_S)
        smask = offs_s < n_splits
        lse = tl.load(lse_ptr + bh * n_splits + offs_s, mask=smask, other=float("-inf"))
        o = tl.load(o_ptr + (bh * n_splits + offs_s)[:, None] * BLOCK_R + offs_d[None, :],
                    mask=smask[:, None] & dmask[None, :], other=0.0).to(tl.float32)
        m = tl.max(lse, 0)
        w = tl.where(lse > float("-inf"), tl.exp(lse - m), 0.0)
        tl.store(out_ptr + bh * r + offs_d, tl.sum(o * w[:, None], 0) / tl.sum(w, 0),
                 mask=dmask)
    else:
        mv = tl.full((BLOCK_S,), float("-inf"), dtype=tl.float32)
        for s0 in range(0, n_splits, BLOCK_S):
            offs_s = s0 + tl.arange(0, BLOCK_S)
            mv = tl.maximum(mv, tl.load(lse_ptr + bh * n_splits + offs_s,
                                        mask=offs_s < n_splits, other=float("-inf")))
        m = tl.max(mv, 0)
        acc = tl.zeros((CHUNK,), dtype=tl.float32)
        lv = tl.zeros((BLOCK_S,), dtype=tl.float32)
        for s0 in range(0, n_splits, BLOCK_S):
            offs_s = s0 + tl.arange(0, BLOCK_S)
            smask = offs_s < n_splits
            lse = tl.load(lse_ptr + bh * n_splits + offs_s, mask=smask, other=float("-inf"))
            w = tl.where(smask & (lse > float("-inf")), tl.exp(lse - m), 0.0)
            o = tl.load(o_ptr + (bh * n_splits + offs_s)[:, None] * BLOCK_R + offs_d[None, :],
                        mask=smask[:, None] & dmask[None, :], other=0.0).to(tl.float32)
            acc += tl.sum(o * w[:, None], 0)
            lv += w
        tl.store(out_ptr + bh * r + offs_d, acc / tl.sum(lv, 0), mask=dmask)


# Programs per SM the splits aim at: one. A split's partials (``H r``, written and read again by
# the merge; float32 when this was measured) grow with the splits: at batch 1, 16 heads and 32k
# positions two programs an SM (256 splits) took 31.3 us, one (128) 25.4, a half 30.0 (H100,
# bench.mla_tiles_probe, which sets the split counts through ``min_tiles`` at two programs an SM;
# results/reference/mla_model_h100.md)
PER_SM = 1


def tiles(r: int, H: int = 16) -> tuple:
    """``(BLOCK_H, BLOCK_N, warps, stages[, swap])`` for latents of ``r`` channels and ``H``
    heads. At DeepSeek's 512 and 16 heads ``(16, 32, 4, 3)``, the fastest of five on the H100 at
    every shape probed (batch 1 and 8, 4k and 32k positions; three stages 3-20% faster than two;
    the transposed products no faster). From 64 heads ``(32, 64, 4, 2)`` with the products
    transposed: 1.6x the former at 128 heads (batch 1 x 32k 64.9 us against 103.4, batch 8 x 4k
    69.3 against 108.0; a latent tile read by four head blocks, not eight;
    ``results/reference/mla_model_h100.md``)."""
    if r > 256 and H >= 64:
        return (32, 64, 4, 2, True)
    return (16, 32, 4, 3) if r > 256 else (16, 64, 4, 2)


def mla_decode(q_lat: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
               pos: torch.Tensor, scale: float, tile: tuple | None = None,
               out_dtype: torch.dtype = torch.float32, min_tiles: int = MIN_TILES,
               pdl: bool = False) -> torch.Tensor:
    """The absorbed-form attention of one new token per sequence over cache positions
    ``[0, pos + 1)``.

    Args:
        q_lat: ``[B, H, r]`` absorbed queries (``q_nope W_UK``), in the cache's dtype.
        q_pe: ``[B, H, R]`` rotated decoupled queries.
        latent: ``[B, S, r]`` (or ``[B, 1, S, r]``) cached latents; k_pe: ``[B, S, R]`` (or
            ``[B, 1, S, R]``) cached rotated keys; last dims contiguous.
        pos: int64 device tensor whose first element is the new token's position (its latent
            already in the cache).
        scale: the softmax scale (``qk_head_dim ** -0.5`` or the design's).
        tile: ``tiles``' tuple to use instead of its choice (tests, benchmarks); a fifth
            element ``True`` computes the products transposed (``s^T = c q^T``, ``o^T = c^T
            p^T``: the tile's positions, then the latent's channels, fill the tensor core's M
            dimension, the heads its N; Hopper's warpgroup MMA wants M >= 64, which 16 heads
            do not give).
        out_dtype: the output's dtype (the merge sums in float32 and rounds once on its store:
            the model asks for its own dtype, so ``W_UV``'s product needs no cast of its own).
        min_tiles: a split's fewest ``BLOCK_N`` tiles (``MIN_TILES``; probes try others).
        pdl: launch both kernels with programmatic dependent launch (Hopper, a Triton with
            ``launch_pdl``; ``kernels.gemv``): each waits for its predecessor's writes before
            its first load, its launch overlapping the predecessor's tail. Off in the
            interpreter.

    Returns:
        ``[B, H, r]`` output latents in ``out_dtype`` (``W_UV`` not applied).

    Raises:
        ValueError: shapes that do not agree.
    """
    if latent.dim() == 4:
        latent, k_pe = latent[:, 0], k_pe[:, 0]
    B, H, r = q_lat.shape
    S, R = latent.shape[1], k_pe.shape[2]
    if latent.shape != (B, S, r) or k_pe.shape[:2] != (B, S) or q_pe.shape != (B, H, R):
        raise ValueError(f"mla_decode: q_lat {list(q_lat.shape)}, q_pe {list(q_pe.shape)}, "
                         f"latent {list(latent.shape)}, k_pe {list(k_pe.shape)} do not agree")
    bh, bn, warps, stages, *swap = tile or tiles(r, H)
    BLOCK_R = max(16, triton.next_power_of_2(r))
    n_hb = triton.cdiv(H, bh)
    n_splits, split_len = plan_splits(B, n_hb, S, bn * min_tiles, _n_sm(q_lat.device),
                                      per_sm=PER_SM)
    # the partials in the latents' 16-bit dtype (half the bytes written and read again by the
    # merge; each normalised by its own sum, so within the dtype's range), float32 for float32
    part = latent.dtype if latent.dtype in (torch.bfloat16, torch.float16) else torch.float32
    o_part = torch.empty(B * H * n_splits, BLOCK_R, device=q_lat.device, dtype=part)
    lse = torch.empty(B * H * n_splits, device=q_lat.device, dtype=torch.float32)
    interp = _interpreted(q_lat)
    pdl = pdl and not interp
    launch = {"launch_pdl": True} if pdl else {}
    _mla_split_kernel[(B, n_hb, n_splits)](
        q_lat, q_pe, latent, k_pe, pos, o_part, lse, H, r, R, split_len, scale * LOG2E,
        q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1),
        latent.stride(0), latent.stride(1), k_pe.stride(0), k_pe.stride(1),
        BLOCK_H=bh, BLOCK_N=bn, BLOCK_R=BLOCK_R, BLOCK_RP=max(16, triton.next_power_of_2(R)),
        UPCAST=interp, PREC="ieee" if q_lat.dtype == torch.float32 else "tf32",
        SWAP=bool(swap and swap[0]), PDL=pdl,
        num_warps=warps, num_stages=stages, **launch)
    out = torch.empty(B, H, r, device=q_lat.device, dtype=out_dtype)
    chunk = min(MERGE_CHUNK, BLOCK_R)
    block_s = max(2, triton.next_power_of_2(n_splits))
    one_pass = block_s <= MERGE_ONE_PASS
    _mla_merge_kernel[(B * H, triton.cdiv(r, chunk))](
        o_part, lse, out, n_splits, r, BLOCK_R=BLOCK_R, CHUNK=chunk,
        BLOCK_S=block_s if one_pass else MERGE_SPLITS, ONE_PASS=one_pass, PDL=pdl, **launch)
    return out


def launches() -> int:
    """Kernel launches of one call: the split kernel and the merge."""
    return 2
