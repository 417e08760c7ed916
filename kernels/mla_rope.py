"""Latent attention's step before the attention, in one launch: the query's RoPE part rotated in
place, the latent RMS-normed and the RoPE key rotated, both written into the cache at the token's
position (what ``zoo.mla_attention``'s torch path does in 24-28 ops: two rotations of 9, the
tables indexed by position, the norm's 8, two cache copies).

RoPE here rotates interleaved channel pairs (``(x0, x1) -> (x0 c - x1 s, x0 s + x1 c)``,
DeepSeek-V2's ``apply_rotary_emb`` on complex pairs) with ``c, s`` the first ``R / 2`` columns of
the design's float32 ``cos, sin [max_seq_len, R]`` tables (the rotate-half layout: each
frequency twice), indexed by the token's position; float32 math, rounded once to the activation
dtype. The norm: ``weight * (x * rsqrt(mean(x^2) + eps))`` in float32, the normed value rounded to
the activation dtype before the weight's product (``zoo.norms.RMSNorm``). One program per token:
its ``H`` query heads' RoPE parts in ``[BLOCK_H, R / 2]`` tiles, then its latent and key. Minimum
DRAM traffic: the query's RoPE parts read and written, the latent and key read once and written
once into the cache.

``reference`` is the PyTorch reference (``tests/kernels/test_mla_rope.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_attention import _interpreted


@triton.jit
def _pairs_rotated(ptr, m, c, s):
    # the interleaved pairs at ptr (even channels) and ptr + 1 (odd), rotated, in their dtype
    x0 = tl.load(ptr, mask=m, other=0.0)
    dt = x0.dtype
    x0 = x0.to(tl.float32)
    x1 = tl.load(ptr + 1, mask=m, other=0.0).to(tl.float32)
    return (x0 * c - x1 * s).to(dt), (x0 * s + x1 * c).to(dt)


@triton.jit
def _mla_rope_kernel(q_ptr, kv_ptr, w_ptr, cos_ptr, sin_ptr, pos_ptr, lat_ptr, kpe_ptr,
                     T, H, r, nope, eps,
                     s_qt, s_qh, s_kvt, s_cos, s_lb, s_ls, s_kb, s_ks,
                     HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_R: tl.constexpr,
                     BLOCK_H: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # programmatic dependent launch: wait for the projection's writes first
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0)  # token b * T + t
    b = (row // T).to(tl.int64)
    pos = tl.load(pos_ptr + row % T).to(tl.int64)
    j = tl.arange(0, BLOCK_HALF)
    jm = j < HALF
    c = tl.load(cos_ptr + pos * s_cos + j, mask=jm, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos * s_cos + j, mask=jm, other=0.0).to(tl.float32)
    row64 = row.to(tl.int64)
    qbase = q_ptr + row64 * s_qt + nope
    for h0 in range(0, H, BLOCK_H):  # the query heads' RoPE parts, in place
        heads = h0 + tl.arange(0, BLOCK_H)
        m = (heads < H)[:, None] & jm[None, :]
        ptr = qbase + heads[:, None] * s_qh + 2 * j[None, :]
        y0, y1 = _pairs_rotated(ptr, m, c[None, :], s[None, :])
        tl.store(ptr, y0, mask=m)
        tl.store(ptr + 1, y1, mask=m)
    kv = kv_ptr + row64 * s_kvt
    ptr = kv + r + 2 * j  # the RoPE key, rotated into the cache
    y0, y1 = _pairs_rotated(ptr, jm, c, s)
    out = kpe_ptr + b * s_kb + pos * s_ks + 2 * j
    tl.store(out, y0, mask=jm)
    tl.store(out + 1, y1, mask=jm)
    offs = tl.arange(0, BLOCK_R)  # the latent, RMS-normed into the cache
    rm = offs < r
    x = tl.load(kv + offs, mask=rm, other=0.0)
    dt = x.dtype
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / r + eps)
    w = tl.load(w_ptr + offs, mask=rm, other=0.0).to(tl.float32)
    y = ((xf * rstd).to(dt).to(tl.float32) * w).to(dt)
    tl.store(lat_ptr + b * s_lb + pos * s_ls + offs, y, mask=rm)


def mla_rope_write_(q: torch.Tensor, kv: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                    cos: torch.Tensor, sin: torch.Tensor, input_pos: torch.Tensor,
                    lat_cache: torch.Tensor, kpe_cache: torch.Tensor, nope: int,
                    pdl: bool = False) -> torch.Tensor:
    """Rotate ``q``'s RoPE parts in place; norm the latents and rotate the RoPE keys of ``kv``
    into the cache at ``input_pos`` (module doc). Returns ``q``.

    Args:
        q: ``[B, T, H, nope + R]`` queries (last dim contiguous; rotated in place).
        kv: ``[B, T, r + R]`` the latent projection's output (``wqkv_a``'s last rows; last dim
            contiguous, tokens at one stride).
        norm_weight: ``[r]`` the latent's RMSNorm weight; eps: its epsilon.
        cos, sin: ``[max_seq_len, R]`` float32 tables (rotate-half layout).
        input_pos: ``[T]`` int64 positions (the same for every sequence).
        lat_cache: ``[B, 1, S, r]``; kpe_cache: ``[B, 1, S, R]`` (last dims contiguous).
        nope: ``qk_nope_head_dim``.
        pdl: launch with programmatic dependent launch (``kernels.mla_decode``'s ``pdl``; off in
            the interpreter).

    Raises:
        ValueError: shapes that do not agree; a last dim not contiguous, tokens not at one
            stride, or tables of different strides.
    """
    B, T, H, qk = q.shape
    r = lat_cache.shape[-1]
    R = qk - nope
    if kv.shape != (B, T, r + R) or kpe_cache.shape[-1] != R or R % 2 or cos.shape[-1] < R:
        raise ValueError(f"mla_rope_write_: q {list(q.shape)}, kv {list(kv.shape)}, latent cache "
                         f"{list(lat_cache.shape)}, key cache {list(kpe_cache.shape)}, tables "
                         f"{list(cos.shape)}, nope {nope} do not agree")
    qs = q.stride()
    # the token rows' stride (one token per sequence: the sequence's; a size-1 dim's own
    # stride is arbitrary, e.g. a slice of the stacked projection's output)
    q_tok, kv_tok = (qs[1], kv.stride(1)) if T > 1 else (qs[0], kv.stride(0))
    if qs[0] != T * q_tok or kv.stride(0) != T * kv_tok:
        raise ValueError("mla_rope_write_: q and kv must hold their tokens at one stride")
    if any(t.stride(-1) != 1 for t in (q, kv, lat_cache, kpe_cache, cos, sin)) \
            or sin.stride(0) != cos.stride(0):
        raise ValueError("mla_rope_write_: last dims must be contiguous and the tables alike")
    half = R // 2
    pdl = pdl and not _interpreted(q)
    _mla_rope_kernel[(B * T,)](
        q, kv, norm_weight, cos, sin, input_pos, lat_cache, kpe_cache, T, H, r, nope, eps,
        q_tok, qs[2], kv_tok, cos.stride(0), lat_cache.stride(0), lat_cache.stride(2),
        kpe_cache.stride(0), kpe_cache.stride(2),
        HALF=half, BLOCK_HALF=max(16, triton.next_power_of_2(half)),
        BLOCK_R=triton.next_power_of_2(r), BLOCK_H=16, PDL=pdl, num_warps=4,
        **({"launch_pdl": True} if pdl else {}))
    return q


def rotate_pairs(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """RoPE on adjacent channel pairs ``(x0, x1) -> (x0 c - x1 s, x0 s + x1 c)`` in PyTorch:
    ``x [..., R]``, ``c, s`` float32 ``[..., R / 2]`` broadcast against x's leading dims; float32
    math, x's dtype out (the numerics the kernel keeps; ``zoo.mla_attention`` runs it)."""
    xf = x.float().reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    a, b = xf[..., 0], xf[..., 1]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2).to(x.dtype)


def reference(q, kv, norm_weight, eps, cos, sin, input_pos, lat_cache, kpe_cache, nope):
    """PyTorch reference of ``mla_rope_write_`` (the numerics of ``zoo.mla_attention``'s torch
    path: ``rotate_pairs`` and ``zoo.norms.RMSNorm``)."""
    r = lat_cache.shape[-1]
    R = q.shape[-1] - nope
    c = cos[input_pos, : R // 2].float()[:, None]  # [T, 1, R / 2]: over q's heads
    s = sin[input_pos, : R // 2].float()[:, None]
    q[..., nope:] = rotate_pairs(q[..., nope:], c, s)
    lat, kpe = kv.split([r, R], dim=-1)
    xf = lat.float()
    normed = norm_weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(lat.dtype)
    lat_cache[:, 0, input_pos] = normed.to(lat_cache.dtype)
    kpe_cache[:, 0, input_pos] = rotate_pairs(kpe, c[:, 0], s[:, 0])
    return q
