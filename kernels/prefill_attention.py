"""Causal prefill attention over a sliding window and with attention sinks, GQA, in one Triton
kernel (flash-attention's online softmax, arXiv:2205.14135 / 2307.08691): the prefill of a local
layer (``cfg.layer_window``) or a sink layer, which SDPA does not run as a flash kernel.

Each program takes ``BLOCK_M`` query rows of one query head and walks only the key tiles those rows
can see: ``[m0 - window + 1, m_last]`` of a local layer (a 32k prompt over a 1024 window reads
about 1/32 of the keys), every earlier key of a global one. The tiles wholly inside the band run
without a mask; the band's edges (the diagonal, the window's far edge) with it. A sink (gpt-oss:
a learned logit ``s_h`` per query head in each softmax's denominator, attending to nothing) starts
the running softmax as a column of its own: ``m = s_h``, ``l = 1``, nothing added to the output.
Scores in float32, in the exp2 domain (the scale times log2 e). In Triton's interpreter the
operands are widened to float32 first (its 16-bit ``tl.dot`` returned garbage, triton 3.9).

``zoo.gqa.blocked`` is the PyTorch reference (``tests/kernels/test_prefill_attention.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_attention import _interpreted

LOG2E = 1.4426950408889634


@triton.jit
def _tile(acc, m_i, l_i, q, k_base, v_base, n0, offs_m, offs_d, dmask, skt, svt, T, window,
          qk_scale, MASK: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST: tl.constexpr,
          PREC: tl.constexpr):
    offs_n = n0 + tl.arange(0, BLOCK_N)
    nmask = offs_n < T
    k = tl.load(k_base + offs_n[None, :] * skt + offs_d[:, None],
                mask=nmask[None, :] & dmask[:, None], other=0.0)  # [BLOCK_D, BLOCK_N]
    if UPCAST:
        k = k.to(tl.float32)
    s = tl.dot(q, k, input_precision=PREC) * qk_scale  # [BLOCK_M, BLOCK_N], log2 units
    if MASK:  # causal, inside the window, inside the prompt
        vis = (offs_n[None, :] <= offs_m[:, None]) & nmask[None, :]
        if window > 0:
            vis = vis & (offs_n[None, :] > offs_m[:, None] - window)
        s = tl.where(vis, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet: no NaN
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_base + offs_n[:, None] * svt + offs_d[None, :],
                mask=nmask[:, None] & dmask[None, :], other=0.0)  # [BLOCK_N, BLOCK_D]
    if UPCAST:
        v = v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return acc, m_new, l_i


@triton.jit
def _prefill_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sink_ptr,
                    sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sob, soh, sot,
                    T, H, G, D, window, qk_scale,
                    HAS_SINK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_D: tl.constexpr, UPCAST: tl.constexpr, PREC: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // G
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    mmask = offs_m < T
    q = tl.load(q_ptr + b.to(tl.int64) * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :],
                mask=mmask[:, None] & dmask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = k_ptr + b.to(tl.int64) * skb + hk * skh
    v_base = v_ptr + b.to(tl.int64) * svb + hk * svh
    if HAS_SINK:  # the sink as the softmax's first column: exp(s_h) in the denominator
        sink = tl.load(sink_ptr + h).to(tl.float32) * 1.4426950408889634  # log2 units
        m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) + sink
        l_i = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)
    else:
        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    m_last = tl.minimum(m0 + BLOCK_M, T) - 1
    hi = m_last + 1  # keys past the block's last row: never seen
    lo = m0 * 0  # (int32 like the window's bounds below)
    full_lo = m0 * 0  # the first tile every row sees whole (past the window's far edge)
    if window > 0:
        lo = tl.maximum(m0 - window + 1, 0) // BLOCK_N * BLOCK_N
        full_lo = tl.maximum(m_last - window + 1, 0)
        full_lo = (full_lo + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
    full_hi = tl.maximum((m0 + 1) // BLOCK_N * BLOCK_N, full_lo)  # tiles ending by row m0
    for n0 in range(lo, full_lo, BLOCK_N):  # the window's far edge: masked
        acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, n0, offs_m, offs_d, dmask, skt,
                              svt, T, window, qk_scale, True, BLOCK_N, UPCAST, PREC)
    for n0 in range(full_lo, full_hi, BLOCK_N):  # inside the band: no mask
        acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, n0, offs_m, offs_d, dmask, skt,
                              svt, T, window, qk_scale, False, BLOCK_N, UPCAST, PREC)
    for n0 in range(full_hi, hi, BLOCK_N):  # the diagonal: masked
        acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, n0, offs_m, offs_d, dmask, skt,
                              svt, T, window, qk_scale, True, BLOCK_N, UPCAST, PREC)
    o = acc / l_i[:, None]
    tl.store(o_ptr + b.to(tl.int64) * sob + h * soh + offs_m[:, None] * sot + offs_d[None, :],
             o.to(o_ptr.dtype.element_ty), mask=mmask[:, None] & dmask[None, :])


def tiles(D: int) -> tuple[int, int, int, int]:
    """``(BLOCK_M, BLOCK_N, warps, stages)`` for head_dim ``D``."""
    return (128, 64, 4, 3) if D <= 64 else (128, 64, 8, 3)


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      window: int | None = None, sinks: torch.Tensor | None = None,
                      scale: float | None = None, tile: tuple | None = None) -> torch.Tensor:
    """Causal attention of a prefill from position 0, within ``window`` if set, with ``sinks``.

    Args:
        q: ``[B, H, T, D]``; k, v: ``[B, Hkv, T, D]`` (``H`` a multiple of ``Hkv``); any strides
            with the last dim contiguous (views of the qkv projection are fine).
        window: a local layer's window (query ``i`` sees keys ``(i - window, i]``), or None.
        sinks: ``[H]`` sink logits (module doc), or None.
        scale: the softmax scale, default ``D ** -0.5``.
        tile: ``tiles``' tuple to use instead of its choice (benchmarks).

    Returns:
        ``[B, H, T, D]`` in q's dtype, stored as ``[B, T, H, D]`` (so ``out.transpose(1, 2)``
        is contiguous for the output projection).

    Raises:
        ValueError: a window below 1, or shapes that do not agree.
    """
    B, H, T, D = q.shape
    Hkv = k.shape[1]
    if k.shape != (B, Hkv, T, D) or v.shape != k.shape or H % Hkv:
        raise ValueError(f"prefill_attention: q {list(q.shape)}, k {list(k.shape)}, "
                         f"v {list(v.shape)} do not agree")
    if window is not None and window < 1:
        raise ValueError(f"prefill_attention: window must be >= 1, got {window}")
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("prefill_attention: the head dim must be contiguous")
    bm, bn, warps, stages = tile or tiles(D)
    out = torch.empty(B, T, H, D, device=q.device, dtype=q.dtype).transpose(1, 2)
    qk_scale = (scale if scale is not None else D ** -0.5) * LOG2E
    sk = sinks if sinks is not None else q  # not read without HAS_SINK
    _prefill_kernel[(triton.cdiv(T, bm), B * H)](
        q, k, v, out, sk, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        T, H, H // Hkv, D, 0 if window is None or window >= T else int(window), qk_scale,
        HAS_SINK=sinks is not None, BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_D=max(16, triton.next_power_of_2(D)), UPCAST=_interpreted(q),
        PREC="ieee" if q.dtype == torch.float32 else "tf32",  # float32: exact products
        num_warps=warps, num_stages=stages)
    return out
