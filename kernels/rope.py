"""RoPE applied to q and k in place, in the rotate-half layout of HF Llama.

``x[..., :D/2], x[..., D/2:] <- x1 cos - x2 sin, x2 cos + x1 sin`` for each head of q and k of each
token, with ``cos, sin [max_seq_len, D]`` tables indexed by the token's position. q and k may be
strided views into the fused qkv GEMM output. One program per token rotates all its q and k
heads; each q/k element is read and written once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


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
    for which in tl.static_range(2):
        if which == 0:
            base = q_ptr + b * stride_qb + t * stride_qt
            n, sh = n_q, stride_qh
        else:
            base = k_ptr + b * stride_kb + t * stride_kt
            n, sh = n_k, stride_kh
        for h0 in range(0, n, BLOCK_H):
            heads = h0 + tl.arange(0, BLOCK_H)
            m = (heads < n)[:, None] & dmask[None, :]
            ptr = base + heads[:, None] * sh + offs[None, :]
            x1 = tl.load(ptr, mask=m, other=0.0)
            dt = x1.dtype
            x1 = x1.to(tl.float32)
            x2 = tl.load(ptr + HALF, mask=m, other=0.0).to(tl.float32)
            # the tables are rounded to the activation dtype, as the reference does
            cc = c.to(dt).to(tl.float32)[None, :]
            ss = s.to(dt).to(tl.float32)[None, :]
            tl.store(ptr, (x1 * cc - x2 * ss).to(dt), mask=m)
            tl.store(ptr + HALF, (x2 * cc + x1 * ss).to(dt), mask=m)


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


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [B, T, heads, head_dim]`` by ``cos, sin [T, head_dim]`` (rotate-half convention,
    HF Llama's ``apply_rotary_pos_emb``), out of place. The zoo's torch path and the reference."""
    d2 = x.shape[-1] // 2
    rot = torch.cat([-x[..., d2:], x[..., :d2]], dim=-1)
    c, s = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    return x * c + rot * s


def reference(q, k, cos, sin, input_pos):
    """PyTorch reference: ``apply_rope`` (out of place) at the positions' rows of the tables."""
    c, s = cos[input_pos], sin[input_pos]
    return apply_rope(q, c, s), apply_rope(k, c, s)
