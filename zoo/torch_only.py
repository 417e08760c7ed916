"""Design features the zoo runs on its torch path only (so far): Gemma's.

Gemma 2 / 3 build their blocks with RMSNorm of weight ``1 + w`` (``norm="rmsnorm1p"``, computed
in float32), norms after the attention and the FFN as well as before (``sandwich_norm``),
embeddings scaled by ``sqrt(d_model)`` (``embed_scale``), a softmax scale of
``query_pre_attn_scalar ** -0.5`` (``attn_scale``; latent attention takes one on either path),
and a RoPE base of their own on the local layers (``rope_local_theta``). The fused kernels of
``kernels/`` do not take these yet: a design with any of them resolves ``kernels=auto`` to
``torch`` and refuses ``kernels=triton`` by field.
"""

from __future__ import annotations

import math

from .errors import DesignError


def features(cfg) -> list[str]:
    """The torch-only features ``cfg`` uses, as ``field=value`` strings (empty: none)."""
    out = []
    if cfg.norm == "rmsnorm1p":
        out.append("norm=rmsnorm1p")
    for f in ("sandwich_norm", "embed_scale"):
        if getattr(cfg, f):
            out.append(f"{f}=true")
    for f in ("attn_scale", "rope_local_theta"):
        # (latent attention takes its scale on both paths: zoo.mla_attention)
        if getattr(cfg, f) is not None and not (f == "attn_scale" and cfg.kv_lora_rank):
            out.append(f"{f}={getattr(cfg, f)}")
    return out


def check(cfg) -> None:
    """Refuse bad values of these fields, and ``kernels=triton`` with any of them, by name.

    Raises:
        DesignError: ``sandwich_norm`` / ``embed_scale`` not booleans, ``attn_scale`` or
            ``rope_local_theta`` not a positive finite number, or ``kernels=triton``.
    """
    for f in ("sandwich_norm", "embed_scale"):
        if not isinstance(getattr(cfg, f), bool):
            raise DesignError(f"{f} must be true or false, got {getattr(cfg, f)!r}")
    for f in ("attn_scale", "rope_local_theta"):
        v = getattr(cfg, f)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not (v > 0 and math.isfinite(v))):
            raise DesignError(f"{f} must be a positive number or null, got {v!r}")
    if cfg.kernels == "triton" and features(cfg):
        raise DesignError(f"{', '.join(features(cfg))}: runs on kernels=torch only (the fused "
                          "kernels do not take Gemma's norms, scales and local RoPE yet)")
