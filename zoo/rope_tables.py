"""RoPE tables of a design: inverse frequencies (with Llama-3 rescaling) and ``cos, sin`` by position.

Used by ``zoo.model`` (the tables are buffers of the model, indexed by position in the kernels).
"""

from __future__ import annotations

import math

import torch

from .config import ModelConfig


def rope_frequencies(cfg: ModelConfig) -> torch.Tensor:
    """RoPE inverse frequencies ``[head_dim // 2]`` (float32), with Llama-3 or linear rescaling
    if configured (``linear``: every frequency divided by ``factor``, transformers'
    ``_compute_linear_scaling_rope_parameters``).

    Base frequencies ``theta^(-2i/head_dim)`` (Su et al. 2021, RoFormer, arXiv:2104.09864). The
    ``llama3`` rescaling divides low frequencies by ``factor`` and blends the middle band, as in
    Meta's reference ``apply_scaling`` and HF ``_compute_llama3_parameters``.
    """
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    rs = cfg.rope_scaling
    if rs and rs.get("rope_type") == "linear":  # position interpolation: every frequency / factor
        return (inv / rs["factor"]).float()
    if rs:
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = torch.where(medium, blended, scaled)
    return inv.float()


def rope_cache(cfg: ModelConfig, seq_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` tables ``[seq_len, head_dim]`` (float32) in the rotate-half layout of HF Llama."""
    inv = rope_frequencies(cfg).to(device)
    t = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()
