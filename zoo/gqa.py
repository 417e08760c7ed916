"""The torch path's GQA decode attention: one query token per sequence, K/V read once per group.

Used by ``zoo.attention.Attention`` (``kernels=torch``) and by the calibration's micro-benchmark of it.
"""

from __future__ import annotations


def grouped_decode_attention(q, k, v, mask):
    """One query token per sequence against a masked cache, GQA without expanding K/V.

    ``scaled_dot_product_attention`` runs GQA only in its flash backend, which takes no mask; with
    a mask it falls back to the math backend and copies K/V once per query head. Here the query
    heads of each KV group form the rows of one batched matmul, so each K/V byte is read once.

    q: ``[B, H, 1, D]``; k, v: ``[B, Hkv, S, D]``; mask: ``[1, S]`` bool (True = attend).
    Returns ``[B, H, 1, D]``.
    """
    B, H, _, D = q.shape
    Hkv = k.shape[1]
    qg = q.view(B, Hkv, H // Hkv, D)
    s = (qg @ k.transpose(-1, -2)).float() * D**-0.5  # [B, Hkv, G, S]
    p = s.masked_fill(~mask, float("-inf")).softmax(-1).to(v.dtype)
    return (p @ v).view(B, H, 1, D)
