"""RoPE tables of a design: inverse frequencies (Llama-3, linear or YaRN rescaling) and ``cos, sin``
by position.

Used by ``zoo.model`` (the tables are buffers of the model, indexed by position in the kernels).
"""

from __future__ import annotations

import math

import torch

from .config import ModelConfig
from .yarn import mscale


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
    if rs and rs.get("rope_type") == "yarn":
        return _yarn(cfg.rope_theta, d, rs)[0]
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


def _yarn(theta: float, d: int, rs: dict) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023, arXiv:2309.00071): ``(inverse frequencies [d // 2], attention
    factor)``. Frequencies interpolated by ``factor`` below the band of ``beta_slow`` rotations
    over the original context, kept above ``beta_fast``, a linear ramp between; the cos / sin
    tables scaled by ``attention_factor`` (default ``0.1 ln(factor) + 1``, or DeepSeek's ratio
    of ``mscale`` to ``mscale_all_dim``), as transformers' ``_compute_yarn_parameters`` (float32,
    its ``truncate`` default true)."""
    factor, old = rs["factor"], rs["original_max_position_embeddings"]
    att = rs.get("attention_factor")
    if att is None:
        m, m_all = rs.get("mscale"), rs.get("mscale_all_dim")
        att = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def dim_of(rot):  # the dimension whose wavelength makes ``rot`` turns over the context
        return d * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = dim_of(fast), dim_of(slow)
    if rs.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    pos = theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - lo) / ((hi - lo) or 0.001)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (the original frequency), 0: interpolate (/ factor)
    return (1.0 / (factor * pos)) * (1 - keep) + (1.0 / pos) * keep, float(att)


def rope_cache(cfg: ModelConfig, seq_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` tables ``[seq_len, head_dim]`` (float32) in the rotate-half layout of HF Llama
    (YaRN's scaled by its attention factor)."""
    inv = rope_frequencies(cfg).to(device)
    t = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    rs = cfg.rope_scaling
    att = _yarn(cfg.rope_theta, cfg.head_dim, rs)[1] if rs and rs.get("rope_type") == "yarn" \
        else 1.0
    return emb.cos() * att, emb.sin() * att
