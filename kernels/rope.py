"""RoPE applied to q and k in place, in the rotate-half layout of HF Llama; and RoPE fused with the
KV-cache write (and its quantize-on-write), one launch for what was three to five.

``x[..., :D/2], x[..., D/2:] <- x1 cos - x2 sin, x2 cos + x1 sin`` for each head of q and k of each
token, with ``cos, sin [max_seq_len, D]`` tables indexed by the token's position. q and k may be
strided views into the fused qkv GEMM output. One program per token rotates all its q and k
heads; each q/k element is read and written once.

``rope_kv_write_``: the same rotation of q (in place), and k rotated and v copied straight into
the static cache at the token's position, quantized on the way for an int8 / fp8 e4m3 cache (one
float32 scale per token and KV head, ``amax / qmax``, IEEE-rounded divisions: the numerics of
``kernels.kv_quant``). Minimum DRAM traffic: q read and written, k and v read once, the cache
written once (1 or 2 bytes per element, plus 4 bytes per token and head of scales).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

QMAX = {"int8": 127.0, "fp8_e4m3": 448.0}


@triton.jit
def _rotate_heads(base, n, sh, c, s, offs, dmask, HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    # rotate heads [0, n) of one token in place (head stride sh), [BLOCK_H, HALF] tiles at a time;
    # the tables are rounded to the activation dtype, as the reference does
    for h0 in range(0, n, BLOCK_H):
        heads = h0 + tl.arange(0, BLOCK_H)
        m = (heads < n)[:, None] & dmask[None, :]
        ptr = base + heads[:, None] * sh + offs[None, :]
        r1, r2 = _rotated(ptr, m, c, s, HALF)
        tl.store(ptr, r1, mask=m)
        tl.store(ptr + HALF, r2, mask=m)


@triton.jit
def _rotated(ptr, m, c, s, HALF: tl.constexpr):
    # the two rotated halves of the [BLOCK_H, HALF] tiles at ptr and ptr + HALF, in their dtype
    x1 = tl.load(ptr, mask=m, other=0.0)
    dt = x1.dtype
    x1 = x1.to(tl.float32)
    x2 = tl.load(ptr + HALF, mask=m, other=0.0).to(tl.float32)
    cc = c.to(dt).to(tl.float32)[None, :]
    ss = s.to(dt).to(tl.float32)[None, :]
    return (x1 * cc - x2 * ss).to(dt), (x2 * cc + x1 * ss).to(dt)


@triton.jit
def _rope_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, pos_ptr, T, n_q, n_k,
                 stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                 HALF: tl.constexpr, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr):
    # one program per token: all q heads, then all k heads, as [BLOCK_H, HALF] tiles
    bt = tl.program_id(0)
    b = (bt // T).to(tl.int64)
    t = bt % T
    pos = tl.load(pos_ptr + t).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    dmask = offs < HALF
    c = tl.load(cos_ptr + pos * 2 * HALF + offs, mask=dmask, other=0.0)
    s = tl.load(sin_ptr + pos * 2 * HALF + offs, mask=dmask, other=0.0)
    _rotate_heads(q_ptr + b * stride_qb + t * stride_qt, n_q, stride_qh, c, s, offs, dmask, HALF,
                  BLOCK_H)
    _rotate_heads(k_ptr + b * stride_kb + t * stride_kt, n_k, stride_kh, c, s, offs, dmask, HALF,
                  BLOCK_H)

def rope_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
          input_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q [B, T, H, D]`` and ``k [B, T, Hkv, D]`` in place (last dim contiguous).

    ``cos, sin``: ``[max_seq_len, D]`` float32 tables; ``input_pos``: ``[T]`` int64 positions.
    Returns ``(q, k)``.
    """
    B, T, H, D = q.shape
    Hkv = k.shape[2]
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos.is_contiguous()
    BLOCK = triton.next_power_of_2(D // 2)
    _rope_kernel[(B * T,)](
        q, k, cos, sin, input_pos, T, H, Hkv, q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2), HALF=D // 2, BLOCK=BLOCK,
        BLOCK_H=max(1, min(triton.next_power_of_2(H), 4096 // BLOCK)), num_warps=4)
    return q, k


@triton.jit
def _store_kv(x1, x2, dst, sdst, m, hmask, QUANT: tl.constexpr, QMAX_: tl.constexpr, HALF: tl.constexpr):
    # x1, x2: [BLOCK_H, BLOCK] float32 halves of one token's heads (already in the activation's
    # rounding); dst: pointers of the first half in the cache; sdst, hmask: [BLOCK_H] scale
    # pointers and the heads that exist
    if QUANT == 0:
        tl.store(dst, x1.to(dst.dtype.element_ty), mask=m)
        tl.store(dst + HALF, x2.to(dst.dtype.element_ty), mask=m)
    else:
        amax = tl.maximum(tl.max(tl.abs(x1), axis=1), tl.max(tl.abs(x2), axis=1))
        scale = tl.maximum(tl.math.div_rn(amax, QMAX_), 1e-12)
        y1 = tl.math.div_rn(x1, scale[:, None])
        y2 = tl.math.div_rn(x2, scale[:, None])
        if QUANT == 2:
            tl.store(dst, y1.to(tl.float8e4nv), mask=m)
            tl.store(dst + HALF, y2.to(tl.float8e4nv), mask=m)
        else:
            r1 = tl.where(y1 >= 0, tl.floor(y1 + 0.5), -tl.floor(-y1 + 0.5))
            r2 = tl.where(y2 >= 0, tl.floor(y2 + 0.5), -tl.floor(-y2 + 0.5))
            tl.store(dst, tl.minimum(tl.maximum(r1, -QMAX_), QMAX_).to(tl.int8), mask=m)
            tl.store(dst + HALF, tl.minimum(tl.maximum(r2, -QMAX_), QMAX_).to(tl.int8), mask=m)
        tl.store(sdst, scale, mask=hmask)


@triton.jit
def _rope_kv_kernel(q_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr, pos_ptr, kc_ptr, vc_ptr, ks_ptr, vs_ptr,
                    T, n_q, n_k, s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh,
                    s_cb, s_ch, s_cs, s_sb, s_sh,
                    HALF: tl.constexpr, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr,
                    BLOCK_HK: tl.constexpr, K_INPLACE: tl.constexpr, QUANT: tl.constexpr,
                    QMAX_: tl.constexpr, PDL: tl.constexpr):
    # one program per token: q heads rotated in place; k rotated and v copied into the cache
    if PDL:  # see kernels.gemv: wait first, let the next kernel launch once the q heads are done
        tl.extra.cuda.gdc_wait()
    bt = tl.program_id(0)
    b = (bt // T).to(tl.int64)
    t = bt % T
    pos = tl.load(pos_ptr + t).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    dmask = offs < HALF
    c = tl.load(cos_ptr + pos * 2 * HALF + offs, mask=dmask, other=0.0)
    s = tl.load(sin_ptr + pos * 2 * HALF + offs, mask=dmask, other=0.0)
    _rotate_heads(q_ptr + b * s_qb + t * s_qt, n_q, s_qh, c, s, offs, dmask, HALF, BLOCK_H)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    heads = tl.arange(0, BLOCK_HK)
    hmask = heads < n_k
    m = hmask[:, None] & dmask[None, :]
    kp = k_ptr + b * s_kb + t * s_kt + heads[:, None] * s_kh + offs[None, :]
    r1, r2 = _rotated(kp, m, c, s, HALF)
    if K_INPLACE or QUANT != 0:
        tl.store(kp, r1, mask=m)
        tl.store(kp + HALF, r2, mask=m)
    if QUANT != 0:  # quantize the k as stored: reload it (the compiler may fold the rounding of
        tl.debug_barrier()  # r1 to the activation dtype and back, and the scale would differ)
        r1 = tl.load(kp, mask=m, other=0.0)
        r2 = tl.load(kp + HALF, mask=m, other=0.0)
    cache = b * s_cb + heads[:, None] * s_ch + pos * s_cs + offs[None, :]
    scales = ks_ptr + b * s_sb + heads * s_sh + pos
    _store_kv(r1.to(tl.float32), r2.to(tl.float32), kc_ptr + cache, scales, m, hmask, QUANT, QMAX_, HALF)
    vp = v_ptr + b * s_vb + t * s_vt + heads[:, None] * s_vh + offs[None, :]
    v1 = tl.load(vp, mask=m, other=0.0).to(tl.float32)
    v2 = tl.load(vp + HALF, mask=m, other=0.0).to(tl.float32)
    scales = vs_ptr + b * s_sb + heads * s_sh + pos
    _store_kv(v1, v2, vc_ptr + cache, scales, m, hmask, QUANT, QMAX_, HALF)


def rope_kv_write_(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                   sin: torch.Tensor, input_pos: torch.Tensor, k_cache: torch.Tensor,
                   v_cache: torch.Tensor, k_scale: torch.Tensor | None = None,
                   v_scale: torch.Tensor | None = None, kv_dtype: str | None = None,
                   k_inplace: bool = False, pdl: bool = False) -> torch.Tensor:
    """RoPE on ``q`` in place and on ``k`` into the cache, ``v`` into the cache: one launch.

    Args:
        q: ``[B, T, H, D]``; k, v: ``[B, T, Hkv, D]`` (last dim contiguous; views of the qkv
            GEMM output are fine). cos, sin: ``[max_seq_len, D]`` float32; input_pos: ``[T]``.
        k_cache, v_cache: ``[B, Hkv, S, D]`` (one layer of the static cache, same strides) in the
            activation dtype, or int8 / float8_e4m3fn with ``k_scale, v_scale [B, Hkv, S]``
            float32 (position stride 1) and ``kv_dtype`` ``'int8'`` / ``'fp8_e4m3'``.
        k_inplace: also write the rotated k back into ``k`` (a prefill attends to it; a
            quantized cache always does, and quantizes what it wrote).
        pdl: launch with programmatic dependent launch (Hopper; see ``kernels.gemv``).

    Returns ``q``. Raises ValueError for a quantized cache without scales or ``kv_dtype``.
    """
    B, T, H, D = q.shape
    Hkv = k.shape[2]
    quant = k_cache.element_size() == 1
    if quant and (k_scale is None or v_scale is None or kv_dtype not in QMAX):
        raise ValueError("a quantized cache needs k_scale, v_scale and kv_dtype int8/fp8_e4m3")
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1 and cos.is_contiguous()
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    BLOCK = triton.next_power_of_2(D // 2)
    ks = k_scale if quant else cos
    vs = v_scale if quant else cos
    _rope_kv_kernel[(B * T,)](
        q, k, v, cos, sin, input_pos, k_cache, v_cache, ks, vs, T, H, Hkv,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), k_cache.stride(0), k_cache.stride(1),
        k_cache.stride(2), ks.stride(0) if quant else 0, ks.stride(1) if quant else 0,
        HALF=D // 2, BLOCK=BLOCK, BLOCK_H=max(1, min(triton.next_power_of_2(H), 4096 // BLOCK)),
        BLOCK_HK=triton.next_power_of_2(Hkv), K_INPLACE=k_inplace,
        QUANT=0 if not quant else (2 if kv_dtype == "fp8_e4m3" else 1),
        QMAX_=QMAX.get(kv_dtype, 1.0), PDL=pdl, num_warps=4, **({"launch_pdl": True} if pdl else {}))
    return q


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [B, T, heads, head_dim]`` by ``cos, sin [T, head_dim]`` (rotate-half convention,
    HF Llama's ``apply_rotary_pos_emb``), out of place. The zoo's torch path and the reference."""
    d2 = x.shape[-1] // 2
    rot = torch.cat([-x[..., d2:], x[..., :d2]], dim=-1)
    c, s = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    return x * c + rot * s


def reference(q, k, cos, sin, input_pos):
    """PyTorch reference: ``apply_rope`` (out of place) at the positions' rows of the tables:
    ``q [B, T, H, D]``, ``k [B, T, Hkv, D]``, ``cos, sin [max_seq_len, D]``, ``input_pos [T]``
    int64 -> the rotated ``(q, k)``, same shapes."""
    c, s = cos[input_pos], sin[input_pos]
    return apply_rope(q, c, s), apply_rope(k, c, s)
