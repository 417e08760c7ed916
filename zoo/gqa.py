"""The torch-side attention of every kind: full or sliding-window causal attention, GQA, with or
without attention sinks, and the one-token decode against a masked cache.

Used by ``zoo.attention.Attention`` (the torch path; on the Triton path the prefill of a local or
sink layer) and by the calibration's micro-benchmark of the decode. Shapes: q ``[B, H, T, D]``,
k and v ``[B, Hkv, S, D]``, ``G = H / Hkv`` query heads per KV head.

Attention sinks (gpt-oss): a learned logit ``s_h`` per query head joins each softmax's
denominator and attends to nothing, ``o = sum_j exp(z_j) v_j / (exp(s_h) + sum_j exp(z_j))``, as
transformers' ``GptOssAttention`` computes it (the sink column dropped after the softmax). Given
the log-sum-exp ``lse`` of the scores without it, ``o = o_plain * sigmoid(lse - s_h)``: how the
FlexAttention path adds it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# the compiled FlexAttention and its block masks, per (T, window, device): built outside any
# CUDA-graph capture (the capture's warm-up calls first)
_FLEX: dict = {}


def window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """Bool ``[T, S]``: key position ``k_pos[j]`` visible to query position ``q_pos[i]`` (causal,
    and within the last ``window`` positions, the query's own included, where ``window`` is
    set): ``q - window < k <= q``."""
    m = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        m = m & (k_pos[None, :] > q_pos[:, None] - window)
    return m


def _math(q, k, v, mask, sinks):
    """Attention in plain ops (the reference): scores in float32, GQA by repeating K/V per
    group, the sink column joined to the softmax and dropped after it."""
    B, H, T, D = q.shape
    G = H // k.shape[1]
    k = k.repeat_interleave(G, dim=1)
    v = v.repeat_interleave(G, dim=1)
    s = (q.float() @ k.float().transpose(-1, -2)) * D**-0.5  # [B, H, T, S]
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.float().view(1, H, 1, 1).expand(B, H, T, 1)], dim=-1)
    p = s.softmax(-1)
    if sinks is not None:
        p = p[..., :-1]
    return (p.to(v.dtype) @ v).to(q.dtype)


def attention(q, k, v, mask: torch.Tensor | None = None, causal: bool = False,
              window: int | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """``softmax(q k^T / sqrt(D) + mask) v`` with GQA: ``[B, H, T, D]`` -> ``[B, H, T, D]``.

    Args:
        mask: bool ``[T, S]`` (True = attend), or None.
        causal: a prefill from position 0 (``T == S``): causal, and within ``window`` if set.
        sinks: ``[H]`` attention-sink logits (module doc), or None.

    SDPA where it can (no sinks, no window); FlexAttention on a GPU for a windowed or sink
    prefill (block-sparse: a 32k prompt never builds a ``T x T`` mask); plain ops otherwise.
    """
    T = q.shape[2]
    gqa = k.shape[1] != q.shape[1]
    if sinks is None and window is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and T > 1,
                                              enable_gqa=gqa)
    if causal and q.device.type == "cuda":
        return _flex(q, k, v, window, sinks)
    if causal:
        pos = torch.arange(T, device=q.device)
        mask = window_mask(pos, pos, window)
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    return _math(q, k, v, mask, sinks)


def _flex(q, k, v, window, sinks, compiled: bool = True):
    """A causal (windowed) prefill through FlexAttention, the sink folded in from its lse."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    T = q.shape[2]
    key = (T, window, q.device, compiled)
    if key not in _FLEX:
        def mask_mod(b, h, qi, ki):
            keep = ki <= qi
            return keep if window is None else keep & (ki > qi - window)
        block = create_block_mask(mask_mod, None, None, T, T, device=q.device)
        fn = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention
        _FLEX[key] = (fn, block)
    fn, block = _FLEX[key]
    gqa = k.shape[1] != q.shape[1]
    if sinks is None:
        return fn(q, k, v, block_mask=block, enable_gqa=gqa)
    out, lse = fn(q, k, v, block_mask=block, enable_gqa=gqa, return_lse=True)
    w = torch.sigmoid(lse - sinks.float().view(1, -1, 1))  # [B, H, T]
    return (out.float() * w[..., None]).to(q.dtype)


def grouped_decode_attention(q, k, v, mask, sinks: torch.Tensor | None = None):
    """One query token per sequence against a masked cache, GQA without expanding K/V.

    ``scaled_dot_product_attention`` runs GQA only in its flash backend, which takes no mask; with
    a mask it falls back to the math backend and copies K/V once per query head. Here the query
    heads of each KV group form the rows of one batched matmul, so each K/V byte is read once.

    q: ``[B, H, 1, D]``; k, v: ``[B, Hkv, S, D]``; mask: ``[1, S]`` bool (True = attend);
    sinks: ``[H]`` or None (module doc). Returns ``[B, H, 1, D]``.
    """
    B, H, _, D = q.shape
    Hkv = k.shape[1]
    qg = q.view(B, Hkv, H // Hkv, D)
    s = (qg @ k.transpose(-1, -2)).float() * D**-0.5  # [B, Hkv, G, S]
    s = s.masked_fill(~mask, float("-inf"))
    if sinks is None:
        p = s.softmax(-1).to(v.dtype)
    else:
        sk = sinks.float().view(1, Hkv, H // Hkv, 1).expand(B, Hkv, H // Hkv, 1)
        p = torch.cat([s, sk], dim=-1).softmax(-1)[..., :-1].to(v.dtype)
    return (p @ v).view(B, H, 1, D)
