"""The torch-side attention of every kind: full or sliding-window causal attention, GQA, with or
without attention sinks, and the one-token decode against a masked cache.

Used by ``zoo.attention.Attention`` (the torch path; on the Triton path the prefill of a local or
sink layer) and by the calibration's micro-benchmark of the decode. Shapes: q ``[B, H, T, D]``,
k and v ``[B, Hkv, S, D]``, ``G = H / Hkv`` query heads per KV head.

Attention sinks (gpt-oss): a learned logit ``s_h`` per query head joins each softmax's
denominator and attends to nothing, ``o = sum_j exp(z_j) v_j / (exp(s_h) + sum_j exp(z_j))``, as
transformers' ``GptOssAttention`` computes it (the sink column dropped after the softmax). Given
the log-sum-exp ``lse`` of the scores without it, ``o = o_plain * sigmoid(lse - s_h)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """Bool ``[T, S]``: key position ``k_pos[j]`` visible to query position ``q_pos[i]`` (causal,
    and within the last ``window`` positions, the query's own included, where ``window`` is
    set): ``q - window < k <= q``."""
    m = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        m = m & (k_pos[None, :] > q_pos[:, None] - window)
    return m


def _math(q, k, v, mask, sinks, scale=None):
    """Attention in plain ops (the reference): scores in float32, GQA by repeating K/V per
    group, the sink column joined to the softmax and dropped after it."""
    B, H, T, D = q.shape
    G = H // k.shape[1]
    k = k.repeat_interleave(G, dim=1)
    v = v.repeat_interleave(G, dim=1)
    s = (q.float() @ k.float().transpose(-1, -2)) * (scale or D**-0.5)  # [B, H, T, S]
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.float().view(1, H, 1, 1).expand(B, H, T, 1)], dim=-1)
    p = s.softmax(-1)
    if sinks is not None:
        p = p[..., :-1]
    return (p.to(v.dtype) @ v).to(q.dtype)


def attention(q, k, v, mask: torch.Tensor | None = None, causal: bool = False,
              window: int | None = None, sinks: torch.Tensor | None = None,
              scale: float | None = None) -> torch.Tensor:
    """``softmax(q k^T / sqrt(D) + mask) v`` with GQA: ``[B, H, T, D]`` -> ``[B, H, T, D]``.

    Args:
        mask: bool ``[T, S]`` (True = attend), or None.
        causal: a prefill from position 0 (``T == S``): causal, and within ``window`` if set.
        sinks: ``[H]`` attention-sink logits (module doc), or None.
        scale: the softmax scale, default ``D ** -0.5``.

    SDPA where it can (no sinks, no window); a windowed or sink prefill in blocks of query rows
    (``blocked``); plain ops otherwise.
    """
    gqa = k.shape[1] != q.shape[1]
    if sinks is None and window is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                              is_causal=causal and q.shape[2] > 1, enable_gqa=gqa)
    if causal:
        return blocked(q, k, v, window, sinks, scale)
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa,
                                              scale=scale)
    return _math(q, k, v, mask, sinks, scale)


SCORE_BUDGET = 1 << 28  # score elements (float32) one block of ``blocked`` may hold: 1 GiB


def blocked(q, k, v, window: int | None, sinks: torch.Tensor | None,
            scale: float | None = None) -> torch.Tensor:
    """A causal prefill from position 0, within ``window`` if set and with ``sinks`` if given,
    in blocks of query rows, each against the keys it can see (``[s - window + 1, e)`` for a
    local layer: a 32k prompt never builds a ``T x T`` score matrix; a block's scores hold at
    most ``SCORE_BUDGET`` elements). Without sinks each block runs SDPA with its band mask (K/V
    repeated per group so a masked kernel takes it, not the math fallback); with sinks plain
    ops (``_math``). Same shapes as ``attention``. (FlexAttention would skip the masked tiles of
    a block too; not yet the zoo's.)"""
    B, H, T, D = q.shape
    G = H // k.shape[1]
    per_row = SCORE_BUDGET / (B * H)  # score elements per head and sequence
    if window is None:  # a block of r rows sees up to T keys
        rows = int(per_row // T)
    else:  # r rows see r + window - 1 keys: the largest r with r (r + window) <= per_row
        rows = int((-window + math.sqrt(window * window + 4 * per_row)) // 2)
    rows = max(16, min(T, rows))
    pos = torch.arange(T, device=q.device)
    out = torch.empty_like(q)
    for s in range(0, T, rows):
        e = min(T, s + rows)
        lo = 0 if window is None else max(0, s - window + 1)
        kb, vb, m = k[:, :, lo:e], v[:, :, lo:e], window_mask(pos[s:e], pos[lo:e], window)
        if sinks is None:
            if G > 1:
                kb, vb = kb.repeat_interleave(G, 1), vb.repeat_interleave(G, 1)
            out[:, :, s:e] = F.scaled_dot_product_attention(q[:, :, s:e], kb, vb, attn_mask=m,
                                                            scale=scale)
        else:
            out[:, :, s:e] = _math(q[:, :, s:e], kb, vb, m, sinks, scale)
    return out


def grouped_decode_attention(q, k, v, mask, sinks: torch.Tensor | None = None,
                             scale: float | None = None):
    """One query token per sequence against a masked cache, GQA without expanding K/V.

    ``scaled_dot_product_attention`` runs GQA only in its flash backend, which takes no mask; with
    a mask it falls back to the math backend and copies K/V once per query head. Here the query
    heads of each KV group form the rows of one batched matmul, so each K/V byte is read once.

    q: ``[B, H, 1, D]``; k, v: ``[B, Hkv, S, D]``; mask: ``[1, S]`` bool (True = attend);
    sinks: ``[H]`` or None (module doc); scale: default ``D ** -0.5``. Returns ``[B, H, 1, D]``.
    """
    B, H, _, D = q.shape
    Hkv = k.shape[1]
    qg = q.view(B, Hkv, H // Hkv, D)
    s = (qg @ k.transpose(-1, -2)).float() * (scale or D**-0.5)  # [B, Hkv, G, S]
    s = s.masked_fill(~mask, float("-inf"))
    if sinks is None:
        p = s.softmax(-1).to(v.dtype)
    else:
        sk = sinks.float().view(1, Hkv, H // Hkv, 1).expand(B, Hkv, H // Hkv, 1)
        p = torch.cat([s, sk], dim=-1).softmax(-1)[..., :-1].to(v.dtype)
    return (p @ v).view(B, H, 1, D)
