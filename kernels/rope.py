"""RoPE applied to q and k in place, in the rotate-half layout of HF Llama.

``x[..., :D/2], x[..., D/2:] <- x1 cos - x2 sin, x2 cos + x1 sin`` for each head of q and k of each
token, with ``cos, sin [max_seq_len, D]`` tables indexed by the token's position. q and k may be
strided views into the fused qkv GEMM output. One program per (token, head); reads and writes
each q/k element once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, pos_ptr, T, n_q, n_k,
                 stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                 HALF: tl.constexpr, BLOCK: tl.constexpr):
    bt = tl.program_id(0)
    head = tl.program_id(1)
    b = bt // T
    t = bt % T
    pos = tl.load(pos_ptr + t).to(tl.int64)
    if head < n_q:
        base = q_ptr + b.to(tl.int64) * stride_qb + t * stride_qt + head * stride_qh
    else:
        base = k_ptr + b.to(tl.int64) * stride_kb + t * stride_kt + (head - n_q) * stride_kh
    offs = tl.arange(0, BLOCK)
    mask = offs < HALF
    x1 = tl.load(base + offs, mask=mask, other=0.0)
    dt = x1.dtype
    x1 = x1.to(tl.float32)
    x2 = tl.load(base + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    # the tables are rounded to the activation dtype, as the reference does
    c = tl.load(cos_ptr + pos * 2 * HALF + offs, mask=mask, other=0.0).to(dt).to(tl.float32)
    s = tl.load(sin_ptr + pos * 2 * HALF + offs, mask=mask, other=0.0).to(dt).to(tl.float32)
    tl.store(base + offs, (x1 * c - x2 * s).to(dt), mask=mask)
    tl.store(base + HALF + offs, (x2 * c + x1 * s).to(dt), mask=mask)


def rope_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
          input_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q [B, T, H, D]`` and ``k [B, T, Hkv, D]`` in place (last dim contiguous).

    ``cos, sin``: ``[max_seq_len, D]`` float32 tables; ``input_pos``: ``[T]`` int64 positions.
    Returns ``(q, k)``.
    """
    B, T, H, D = q.shape
    Hkv = k.shape[2]
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos.is_contiguous()
    _rope_kernel[(B * T, H + Hkv)](
        q, k, cos, sin, input_pos, T, H, Hkv, q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2), HALF=D // 2,
        BLOCK=triton.next_power_of_2(D // 2), num_warps=1)
    return q, k


def reference(q, k, cos, sin, input_pos):
    """PyTorch reference: the zoo's ``apply_rope`` (out of place)."""
    from zoo.model import apply_rope

    c, s = cos[input_pos], sin[input_pos]
    return apply_rope(q, c, s), apply_rope(k, c, s)
