"""Multi-head latent attention (``zoo.latent``; DeepSeek-V2's, as transformers' ``DeepseekV2Attention``
computes it): the cache holds each token's normed latent and its rotated decoupled key, nothing per
head. A prefill expands every position's keys and values through ``kv_b`` (the naive form); a decode
step attends in the absorbed form (``q_nope W_UK`` scored against the latents, ``W_UV`` after the
softmax: FlashMLA's), reading the latents once for every head: on the torch path in float32
(``absorbed``, the reference), on the Triton path (``kernels=triton``, a GPU's default) as
``decode``: ``q_nope W_UK`` and ``W_UV`` as a GEMV per head (``kernels.head_gemv``; above 16
sequences cuBLAS's batched GEMM), the attention over the latents in ``kernels.mla_decode`` (one pass
over the cache for every head, the splits merged in the model's dtype). On the Triton path the RoPE
rotations, the latent's norm and the cache write are one launch (``kernels.mla_rope``) at every
stage, and the query bottleneck's norm Triton's RMSNorm (on the decode GEMV path: in ``wq_b``'s
prologue). No host synchronisation: a CUDA graph replays it.
RoPE on the decoupled part rotates interleaved channel pairs (transformers' ``apply_rotary_emb``
on complex pairs), from the design's ``cos, sin`` tables (YaRN's attention factor included).
"""

from __future__ import annotations

import torch
from torch import nn

from kernels import ops
from kernels.head_gemv import per_head_gemv
from kernels.mla_rope import rotate_pairs

from . import gqa
from .cache import KVCache
from .config import ModelConfig
from .latent import qk_head_dim
from .norms import RMSNorm
from .nvtx import annotate


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on adjacent channel pairs ``(x0, x1) -> (x0 c - x1 s, x0 s + x1 c)``.
    x: ``[B, heads, T, R]``; cos, sin: ``[T, R]`` in the rotate-half layout (``zoo.rope_tables``:
    each frequency twice), of which the first ``R / 2`` columns are used
    (``kernels.mla_rope.rotate_pairs``). Float32 math, x's dtype out."""
    R = x.shape[-1]
    return rotate_pairs(x, cos[:, : R // 2].float(), sin[:, : R // 2].float())


class MLAttention(nn.Module):
    """Multi-head latent attention: x ``[B, T, d_model]`` -> ``[B, T, d_model]``.

    Parameters: ``wqkv_a [Q + kv_lora_rank + rope, d]``, the query projection (``Q = H (nope +
    rope)``; with a query bottleneck its down-projection, ``Q = q_lora_rank``, then ``q_norm`` and
    ``wq_b [H (nope + rope), q_lora_rank]``) stacked over the latent projection (DeepSeek's
    ``q_proj`` / ``q_a_proj`` over ``kv_a_proj_with_mqa``: both read the block's normed input, so
    a decode step reads them in one GEMV launch), ``kv_norm``, ``wkv_b [H (nope + v),
    kv_lora_rank]``, ``wo [d, H v]``. The cache's ``k`` buffers hold the latents ``[B, 1, S,
    kv_lora_rank]`` and its ``v`` buffers the rotated keys ``[B, 1, S, qk_rope_head_dim]``.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        H, d, qk = cfg.n_heads, cfg.d_model, qk_head_dim(cfg)
        # the stacked projection's rows: the query's (or its bottleneck's), the latent's
        self.qkv_a_rows = (cfg.q_lora_rank or H * qk, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
        self.wqkv_a = nn.Linear(d, sum(self.qkv_a_rows), bias=False)
        if cfg.q_lora_rank:
            self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.norm_eps)
            self.wq_b = nn.Linear(cfg.q_lora_rank, H * qk, bias=False)
        self.kv_norm = RMSNorm(cfg.kv_lora_rank, cfg.norm_eps)
        self.wkv_b = nn.Linear(cfg.kv_lora_rank, H * (cfg.qk_nope_head_dim + cfg.v_head_dim),
                               bias=False)
        self.wo = nn.Linear(H * cfg.v_head_dim, d, bias=False)
        self.cache: KVCache | None = None
        # set by setup_cache: the decode kernels' programmatic dependent launch (the Triton
        # path's RoPE / cache write and the latent attention); the RoPE fold is GQA's only
        self.pdl = self.fold_rope = False

    def absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_UK [H, nope, r], W_UV [H, v, r])``: views of ``wkv_b``'s weight, each head's rows
        that expand the latent into its key's non-RoPE part and into its value."""
        cfg = self.cfg
        w = self.wkv_b.weight.view(cfg.n_heads, cfg.qk_nope_head_dim + cfg.v_head_dim,
                                   cfg.kv_lora_rank)
        return w[:, :cfg.qk_nope_head_dim], w[:, cfg.qk_nope_head_dim:]

    def absorbed(self, q_nope, q_pe, lat, kpe, mask, scale):
        """Attention of one token per sequence in the absorbed form (DeepSeek-V2, Sec. 2.1.2;
        FlashMLA): ``q_nope W_UK`` scored against the latents themselves, the probabilities
        applied to the latents, ``W_UV`` after; every head reads the same ``[S, kv_lora_rank]``
        latents and ``[S, qk_rope_head_dim]`` keys once, no per-head keys or values built.
        q_nope ``[B, H, 1, nope]``, q_pe ``[B, H, 1, rope]``, lat ``[B, 1, S, r]``, kpe
        ``[B, 1, S, rope]``, mask ``[1, S]`` or None -> ``[B, H, 1, v_head_dim]``."""
        w_uk, w_uv = self.absorbed_weights()
        q_lat = q_nope.float() @ w_uk.float()  # [B, H, 1, r]
        s = (q_lat @ lat.float().transpose(-1, -2) + q_pe.float() @ kpe.float().transpose(-1, -2))
        s = s * scale  # [B, H, 1, S]
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        o_lat = s.softmax(-1) @ lat.float()  # [B, H, 1, r]
        return (o_lat @ w_uv.float().transpose(-1, -2)).to(q_nope.dtype)

    def decode(self, q_nope, q_pe, lat, kpe, pos, scale):
        """The absorbed form on the Triton path (``absorbed`` is its reference): ``q_nope W_UK``
        and the output's ``W_UV`` in the model's dtype, where ``kernels.head_gemv.per_head_gemv``
        says so a GEMV per head (``kernels.head_gemv``, reading ``wkv_b``'s weight in place, the
        output written in the ``[B, H, v]`` order ``wo`` reads), else a cuBLAS batched GEMM over
        the heads (faster there: ``results/reference/mla_model_h100.md``);
        ``kernels.mla_decode`` between them over the cache's positions ``[0, pos + 1)``.
        q_nope ``[B, H, 1, nope]``, q_pe ``[B, H, 1, rope]``, lat ``[B, 1, S, r]``, kpe
        ``[B, 1, S, rope]``, pos ``[1]`` int64 (a device tensor) -> ``[B, H, 1, v_head_dim]``."""
        w_uk, w_uv = self.absorbed_weights()
        per_head = per_head_gemv(*q_nope.shape[:2])
        if per_head:
            q_lat = ops.head_gemv(q_nope[:, :, 0], w_uk, pdl=self.pdl)  # [B, H, r]
        else:
            q_lat = torch.bmm(q_nope[:, :, 0].transpose(0, 1), w_uk).transpose(0, 1)
        o_lat = ops.mla_decode(q_lat, q_pe[:, :, 0], lat, kpe, pos, scale,
                               out_dtype=q_nope.dtype, pdl=self.pdl)  # [B, H, r]
        if per_head:
            return ops.head_gemv(o_lat, w_uv, transposed=True, pdl=self.pdl).unsqueeze(2)
        return torch.bmm(o_lat.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1).unsqueeze(2)

    def skinny(self, x, norm, residual, rope, input_pos):
        """The decode step on the GEMV path (``zoo.model.Block.skinny``): the stacked query and
        latent projection one GEMV with ``norm`` and the residual add in its prologue
        (``kernels.decode_linear``; the query bottleneck's norm in ``wq_b``'s), ``attend``, the
        output projection a GEMV. x, residual: ``[B, 1, d_model]``; returns ``(attention out,
        h)``, ``h = x + residual``."""
        cfg = self.cfg
        with annotate("qkv"):
            qkv_a, h = ops.linear(x, self.wqkv_a, "norm", norm, residual, pdl_trigger=False)
            q, kv = qkv_a.split(self.qkv_a_rows, dim=-1)
            if cfg.q_lora_rank:
                q = ops.linear(q, self.wq_b, "norm", self.q_norm, pdl_trigger=False)[0]
        y = self.attend(q, kv, rope, input_pos, None, None)
        with annotate("out_proj"):
            return ops.linear(y, self.wo), h

    def forward(self, x, rope, input_pos, kv_len, mask):
        """``x [B, T, d_model]`` at positions ``input_pos [T]`` -> ``[B, T, d_model]``, the
        latents written into the cache and attended over ``[0, kv_len)`` (``mask [T, kv_len]``
        or None: causal)."""
        cfg = self.cfg
        with annotate("qkv"):
            qkv_a = self.wqkv_a(x)  # the query (or its bottleneck) over the latent projection
            q, kv = qkv_a.split(self.qkv_a_rows, dim=-1)
            if cfg.q_lora_rank:  # the bottleneck's norm: Triton's on the Triton path
                q = self.wq_b(self.q_norm.fused(q) if cfg.kernels == "triton"
                              else self.q_norm(q))
        y = self.attend(q, kv, rope, input_pos, kv_len, mask)
        with annotate("out_proj"):
            return self.wo(y)

    def attend(self, q, kv, rope, input_pos, kv_len, mask):
        """From the query ``q [B, T, H (nope + R)]`` and the latent projection ``kv [B, T,
        kv_lora_rank + R]``: RoPE, the latent's norm, the cache write and the attention
        (``forward``'s arguments) -> ``[B, T, H v_head_dim]``, before the output projection."""
        cfg = self.cfg
        B, T, _ = q.shape
        H, nope, R, V = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        triton = cfg.kernels == "triton"
        q = q.view(B, T, H, nope + R)
        cache, i = self.cache, self.layer
        if triton:  # RoPE, the latent's norm and the cache write in one launch; the full tables
            with annotate("kv_write"):  # (zoo.model hands the Triton path all positions')
                ops.mla_rope_write_(q, kv, self.kv_norm.weight, self.kv_norm.eps, *rope,
                                    input_pos, cache.k[i], cache.v[i], nope,
                                    pdl=self.pdl and T == 1)
            lat, kpe = cache.k[i], cache.v[i]
        q_nope, q_pe = q.transpose(1, 2).split([nope, R], dim=-1)  # (rotated: Triton's)
        if not triton:
            latent, k_pe = kv.split([cfg.kv_lora_rank, R], dim=-1)
            with annotate("rope"):
                q_pe = rotate_interleaved(q_pe, *rope)
                k_pe = rotate_interleaved(k_pe.view(B, 1, T, R), *rope)
            with annotate("kv_write"):
                lat, kpe = cache.update(i, input_pos,
                                        self.kv_norm(latent).view(B, 1, T, cfg.kv_lora_rank), k_pe)
        with annotate("attention"):
            n = kv_len if kv_len is not None else lat.shape[2]
            scale = cfg.attn_scale or qk_head_dim(cfg) ** -0.5
            m = None if mask is None else mask[:, :n]
            if T == 1 and triton:  # the length read from input_pos on the device: no mask
                y = self.decode(q_nope, q_pe, lat, kpe, input_pos[-1:], scale)
            elif T == 1:  # a decode step: the absorbed form over the latents
                y = self.absorbed(q_nope, q_pe, lat[:, :, :n], kpe[:, :, :n], m, scale)
            else:
                kv = self.wkv_b(lat[:, 0, :n]).view(B, n, H, nope + V).transpose(1, 2)
                k_nope, v = kv.split([nope, V], dim=-1)
                k = torch.cat([k_nope, kpe[:, :, :n].expand(B, H, n, R)], dim=-1)
                qs = q.transpose(1, 2) if triton else torch.cat([q_nope, q_pe], dim=-1)
                y = gqa.attention(qs, k, v, causal=m is None, mask=m, scale=scale)
        return y.transpose(1, 2).reshape(B, T, H * V)
