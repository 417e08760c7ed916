"""Multi-head latent attention (MLA, DeepSeek-V2, arXiv:2405.04434): its fields' rules and sizes.

A design is MLA when ``kv_lora_rank > 0``. Each token's keys and values are compressed into one
latent of ``kv_lora_rank`` channels (RMS-normed), from which every head's ``qk_nope_head_dim``-wide
key part and ``v_head_dim``-wide value are expanded (``kv_b``); a decoupled key of
``qk_rope_head_dim`` channels carries RoPE, shared by the heads. The cache holds the latent and
the rotated key only: ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer, against
GQA's ``2 n_kv_heads head_dim``. Queries come from ``d_model`` directly, or through a rank
``q_lora_rank`` bottleneck (RMS-normed) when it is set. The design's ``head_dim`` is the RoPE
part's (``qk_rope_head_dim``, as transformers' ``DeepseekV2Config`` sets it). Torch-free.
"""

from __future__ import annotations

from .errors import DesignError

FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def is_mla(cfg) -> bool:
    """Whether ``cfg`` attends with MLA (``kv_lora_rank > 0``)."""
    return cfg.kv_lora_rank > 0


def qk_head_dim(cfg) -> int:
    """A query / key head's width: ``qk_nope_head_dim + qk_rope_head_dim``."""
    return cfg.qk_nope_head_dim + cfg.qk_rope_head_dim


def kv_elements_per_token(cfg) -> int:
    """Cache elements per token and layer: the latent and the rotated key."""
    return cfg.kv_lora_rank + cfg.qk_rope_head_dim


def check(cfg) -> None:
    """Refuse MLA ranks and widths that do not fit, by name (``ModelConfig.validate``).

    Raises:
        DesignError: a negative or non-integer field; MLA fields without ``kv_lora_rank``; a
            ``kv_lora_rank`` or ``q_lora_rank`` not below ``d_model`` (no compression); a
            ``qk_rope_head_dim`` that is odd, zero, or not the design's ``head_dim``; a zero
            ``qk_nope_head_dim`` or ``v_head_dim``; ``n_kv_heads`` other than ``n_heads``; a
            quantized cache; a window, sinks or QK-norm with MLA (not modelled).
    """
    for f in FIELDS:
        v = getattr(cfg, f)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise DesignError(f"{f} must be a non-negative integer, got {v!r}")
    if not is_mla(cfg):
        for f in FIELDS:
            if getattr(cfg, f):
                raise DesignError(f"{f}={getattr(cfg, f)} needs kv_lora_rank > 0 (multi-head "
                                  "latent attention)")
        return
    for f in ("kv_lora_rank", "q_lora_rank"):
        if getattr(cfg, f) >= cfg.d_model:
            raise DesignError(f"{f} ({getattr(cfg, f)}) must be below d_model ({cfg.d_model}): "
                              "a latent compresses")
    if cfg.qk_rope_head_dim <= 0 or cfg.qk_rope_head_dim % 2:
        raise DesignError(f"qk_rope_head_dim must be a positive even number (RoPE rotates "
                          f"pairs), got {cfg.qk_rope_head_dim}")
    if cfg.head_dim != cfg.qk_rope_head_dim:
        raise DesignError(f"head_dim ({cfg.head_dim}) must equal qk_rope_head_dim "
                          f"({cfg.qk_rope_head_dim}) for MLA (the RoPE part's width)")
    for f in ("qk_nope_head_dim", "v_head_dim"):
        if getattr(cfg, f) <= 0:
            raise DesignError(f"{f} must be positive for MLA, got {getattr(cfg, f)}")
    if cfg.n_kv_heads != cfg.n_heads:
        raise DesignError(f"n_kv_heads ({cfg.n_kv_heads}) must equal n_heads ({cfg.n_heads}) "
                          "for MLA: every head expands its own key and value from the latent")
    if cfg.kv_dtype in ("int8", "fp8_e4m3"):
        raise DesignError(f"kv_dtype={cfg.kv_dtype} with kv_lora_rank > 0: the latent cache is "
                          "16-bit (kernels.mla_decode reads no quantized one)")
    if cfg.sliding_window is not None or cfg.attn_sinks or cfg.qk_norm != "none":
        raise DesignError("sliding_window, attn_sinks or qk_norm with kv_lora_rank > 0: not "
                          "modelled for MLA")
