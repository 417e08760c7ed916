"""Causal self-attention with grouped-query heads, RoPE and the static KV cache: the torch path,
and the Triton path (RoPE fused with the cache write, the split-K decode kernel; SDPA for a
prefill, ``kernels.prefill_attention`` for a local or sink layer's). Part of ``zoo.model``'s
block. A local layer (``cfg.layer_window``) attends over its sliding window, its cache a ring of
the window's slots (``zoo.cache``); with ``attn_sinks`` each query head has a learned sink logit
(``zoo.gqa``).
"""

from __future__ import annotations

import torch
from torch import nn

from kernels import ops
from kernels.ops import decode_attention, rope_kv_write_
from kernels.rope import apply_rope, rope_

from . import gqa
from .cache import KVCache
from .config import ModelConfig
from .norms import RMSNorm, RMSNorm1p
from .nvtx import annotate


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads and a static KV cache.

    x: ``[B, T, d_model]`` -> ``[B, T, d_model]``. Query heads ``n_heads``, KV heads ``n_kv_heads``;
    each KV head serves ``n_heads / n_kv_heads`` query heads (GQA, arXiv:2305.13245). With
    ``qk_norm``, RMSNorm of the queries and keys before RoPE: per head (``q_norm``, ``k_norm``
    over ``head_dim``: Qwen3) or over the whole projection (``q_dim``, ``kv_dim``: OLMoE).
    ``window``: the layer's sliding window (positions), None for full attention; ``sinks [H]``
    with ``attn_sinks`` (float32, gpt-oss's).
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        self.wqkv = nn.Linear(cfg.d_model, cfg.q_dim + 2 * cfg.kv_dim, bias=cfg.qkv_bias)
        self.wo = nn.Linear(cfg.q_dim, cfg.d_model, bias=cfg.out_bias)
        self.window = cfg.layer_window(layer)
        self.sinks = nn.Parameter(torch.zeros(cfg.n_heads)) if cfg.attn_sinks else None
        if cfg.qk_norm != "none":
            head = cfg.qk_norm == "head"
            norm = RMSNorm1p if cfg.norm == "rmsnorm1p" else RMSNorm  # Gemma's: 1 + w
            self.q_norm = norm(cfg.head_dim if head else cfg.q_dim, cfg.norm_eps)
            self.k_norm = norm(cfg.head_dim if head else cfg.kv_dim, cfg.norm_eps)
        self.cache: KVCache | None = None
        self.pdl = False  # programmatic dependent launch of the decode kernels (setup_cache)
        self.fold_rope = False  # decode: RoPE and the cache write inside attention (setup_cache)

    def forward(self, x, rope, input_pos, kv_len, mask):
        """``x [B, T, d_model]`` -> ``[B, T, d_model]``: the tokens at ``input_pos [T]`` (int64)
        written into the cache and attending to positions ``[0, kv_len)`` (``None``: the whole
        cache), ``mask [T, kv_len]`` bool or None (causal); ``rope``: the ``(cos, sin)``
        tables."""
        cfg = self.cfg
        B, T, _ = x.shape
        with annotate("qkv"):
            qkv = self.wqkv(x)
        q, k, v = self._heads(qkv)
        if cfg.kernels == "triton":
            y = self._triton(q, k, v, rope, input_pos, kv_len, mask)
            with annotate("out_proj"):
                return self.wo(y)
        with annotate("rope"):
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        self._refuse_chunk(T, mask)
        with annotate("kv_write"):
            kc, vc = self.cache.update(self.layer, input_pos, k, v)
        with annotate("attention"):
            if T > 1 and mask is None:  # a prefill from position 0: the fresh k, v
                y = gqa.attention(q, k, v, causal=True, window=self.window, sinks=self.sinks,
                                  scale=cfg.attn_scale)
            else:
                y = self._cached(q, kc, vc, kv_len, mask)
        with annotate("out_proj"):
            return self.wo(y.transpose(1, 2).reshape(B, T, cfg.q_dim))

    def skinny(self, x, norm, residual, rope, input_pos):
        """The decode step's attention on the GEMV path (``zoo.model.Block.skinny``): the qkv
        GEMV with ``norm`` and the residual add in its prologue (under PDL it lets decode
        attention launch only when it ends: ``kernels.gemv``), ``attend``, the out_proj GEMV.
        x, residual: ``[B, 1, d_model]``; returns ``(attention out, h)``, ``h = x + residual``."""
        with annotate("qkv"):
            qkv, h = ops.linear(x, self.wqkv, "norm", norm, residual, pdl_trigger=False)
        y = self.attend(qkv, rope, input_pos)
        with annotate("out_proj"):
            return ops.linear(y, self.wo), h

    def attend(self, qkv, rope, input_pos):
        """Decode attention from the fused qkv output ``[B, 1, q_dim + 2 kv_dim]``: RoPE with the
        K/V cache write (one kernel), then the split-K decode kernel; or, with ``fold_rope``
        (the default; ``switches.rope_in_attention=false`` unfolds), both in the decode kernel's
        launch. Returns ``[B, 1, q_dim]``."""
        return self._triton(*self._heads(qkv), rope, input_pos, 1, None)

    def _heads(self, qkv):
        """``qkv [B, T, q_dim + 2 kv_dim]`` -> q ``[B, T, n_heads, head_dim]``, k and v ``[B, T,
        n_kv_heads, head_dim]``, q and k normalised first where the design has QK-norm (over the
        projection, or per head): on the Triton path one kernel (``kernels.qk_norm``: both norms
        and v made dense, which the decode kernel reads at one stride with k), on the torch path
        the norms' ops."""
        cfg = self.cfg
        B, T, _ = qkv.shape
        head = cfg.qk_norm == "head"
        if cfg.qk_norm != "none" and cfg.kernels == "triton":
            with annotate("qk_norm"):
                q, k, v = ops.qk_norm(qkv, cfg.q_dim, cfg.kv_dim, self.q_norm.weight,
                                      self.k_norm.weight, cfg.norm_eps,
                                      cfg.head_dim if head else 0, cfg.norm == "rmsnorm1p")
        else:
            q, k, v = qkv.split([cfg.q_dim, cfg.kv_dim, cfg.kv_dim], dim=-1)
            if cfg.qk_norm == "full":
                with annotate("qk_norm"):
                    q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, cfg.n_heads, cfg.head_dim)
        k = k.view(B, T, cfg.n_kv_heads, cfg.head_dim)
        v = v.view(B, T, cfg.n_kv_heads, cfg.head_dim)
        if head and cfg.kernels != "triton":
            with annotate("qk_norm"):
                q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def _refuse_chunk(self, T: int, mask) -> None:
        """Before any write: a chunk of several tokens after a prefix (``mask`` given) on a
        local layer is refused (its ring holds only the window; not modelled).

        Raises:
            ValueError: that case."""
        if T > 1 and mask is not None and self.cache.ring(self.layer):
            raise ValueError("a prefill chunk after a prefix on a sliding-window layer is not "
                             "supported (its cache is a ring of the window)")

    def _cached(self, q, kc, vc, kv_len, mask):
        """Torch attention of ``q [B, H, T, D]`` over the cache views ``[B, Hkv, capacity, D]``:
        the first ``kv_len`` positions (a ring: its slots up to ``min(kv_len, capacity)``, which
        for one token are the window's), ``mask [T, kv_len]`` or None."""
        T, cap = q.shape[2], kc.shape[2]
        n = cap if kv_len is None else min(kv_len, cap)
        kc, vc = kc[:, :, :n], vc[:, :, :n]
        mask = None if mask is None else mask[:, :n]
        scale = self.cfg.attn_scale
        if mask is not None and T == 1:
            return gqa.grouped_decode_attention(q, kc, vc, mask, self.sinks, scale)
        return gqa.attention(q, kc, vc, mask=mask, sinks=self.sinks, scale=scale)

    def _scales(self):
        """This layer's K and V scales ``[B, Hkv, S]`` of a quantized cache, else ``(None, None)``."""
        cache, i = self.cache, self.layer
        return (cache.k_scale[i], cache.v_scale[i]) if cache.quantized else (None, None)

    def _rope_write(self, q, k, v, rope, input_pos, k_inplace):
        cache, i = self.cache, self.layer
        scales = self._scales()
        rope_kv_write_(q, k, v, *rope, input_pos, cache.k[i], cache.v[i], *scales,
                       kv_dtype=cache.kv_dtype, k_inplace=k_inplace, pdl=self.pdl)
        return scales

    def _triton(self, q, k, v, rope, input_pos, kv_len, mask):
        """Fused path: one kernel rotates q and k and writes k, v into the cache (quantized if so
        configured); Triton decode attention for one new token (with ``fold_rope`` the rotation
        and the write happen in its launch), SDPA for a prefill from 0."""
        cfg, cache, i = self.cfg, self.cache, self.layer
        B, T = q.shape[:2]
        if T == 1 and (self.fold_rope or cache.ring(i)):  # a ring's slot: the kernel's
            with annotate("attention"):  # RoPE and the cache write in the same launch
                y = decode_attention(q[:, 0], cache.k[i], cache.v[i], input_pos, *self._scales(),
                                     pdl=self.pdl, new_kv=(k[:, 0], v[:, 0], *rope),
                                     sinks=self.sinks)[:, :, None]
        elif T == 1:
            with annotate("kv_write"):
                scales = self._rope_write(q, k, v, rope, input_pos, k_inplace=False)
            with annotate("attention"):
                y = decode_attention(q.transpose(1, 2), cache.k[i], cache.v[i], input_pos,
                                     *scales, pdl=self.pdl, sinks=self.sinks)
        elif mask is None and kv_len == T and (self.window or self.sinks is not None):
            with annotate("rope"):  # a local or sink layer's prefill: RoPE, the (ring) write,
                rope_(q, k, *rope, input_pos)  # then attention over the fresh k, v
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            with annotate("kv_write"):
                cache.write(i, input_pos, k, v)
            with annotate("attention"):  # one kernel over the band (kernels.prefill_attention)
                y = ops.prefill_attention(q, k, v, self.window, self.sinks)
        elif mask is None and kv_len == T:  # prefill from position 0: attend to the fresh k, v
            with annotate("kv_write"):
                self._rope_write(q, k, v, rope, input_pos, k_inplace=True)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            with annotate("attention"):
                y = gqa.attention(q, k, v, causal=True)
        else:  # a chunk after a prefix: read (dequantized) cache, explicit mask
            self._refuse_chunk(T, mask)
            with annotate("rope"):
                rope_(q, k, *rope, input_pos)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            with annotate("kv_write"):
                kc, vc = cache.update(i, input_pos, k, v)
            with annotate("attention"):
                y = self._cached(q, kc, vc, kv_len, mask)
        return y.transpose(1, 2).reshape(B, T, cfg.q_dim)
