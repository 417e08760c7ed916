"""The normalisation layers of the zoo's blocks: RMSNorm (with its fused Triton kernel), Gemma's
``1 + w`` RMSNorm, and the design's choice among them and LayerNorm (``ModelConfig.norm``)."""

from __future__ import annotations

import torch
from torch import nn

from kernels import ops

from .config import ModelConfig


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467), computed in float32 like HF Llama.

    x: ``[..., dim]`` -> same shape and dtype.
    """

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., dim]`` -> the same shape and dtype: ``weight * x / sqrt(mean(x^2) + eps)``,
        the normalization in float32 (Zhang & Sennrich 2019, arXiv:1910.07467)."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)

    def fused(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """The Triton kernel: ``y`` or, with ``residual``, ``(y, x + residual)``."""
        return ops.rmsnorm(x, self.weight, self.eps, residual=residual)


class RMSNorm1p(nn.Module):
    """Gemma's RMSNorm: weight ``1 + w`` (``w`` starts at 0), the product taken in float32 and
    rounded once, as transformers' ``Gemma3RMSNorm``. x: ``[..., dim]`` -> same shape and
    dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., dim]`` -> ``(1 + weight) * x / sqrt(mean(x^2) + eps)`` in x's dtype."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype)


def make_norm(cfg: ModelConfig, dim: int | None = None) -> nn.Module:
    """The design's normalization layer over ``dim`` channels (default ``d_model``)."""
    dim = dim or cfg.d_model
    if cfg.norm == "rmsnorm":
        return RMSNorm(dim, cfg.norm_eps)
    if cfg.norm == "rmsnorm1p":
        return RMSNorm1p(dim, cfg.norm_eps)
    return nn.LayerNorm(dim, eps=cfg.norm_eps)
