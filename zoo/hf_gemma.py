"""Gemma 3's text ``config.json`` (``model_type: gemma3_text``) in and out: the fields of
``zoo.torch_only`` (the ``1 + w`` RMSNorm, sandwich norms, the embedding scale, the softmax scale
``query_pre_attn_scalar ** -0.5``, the local layers' RoPE base), GeGLU, QK-norm per head, tied
embeddings and the local/global pattern, read as transformers 5 reads them (``Gemma3TextConfig``).
Called by ``zoo.hf_config``; works on a design's fields as a dict (torch-free).
"""

from __future__ import annotations

from typing import Any

from . import layer_types as lt
from .errors import DesignError

# transformers 5's Gemma3TextConfig defaults for the keys a config.json may lack
DEFAULTS = {"max_position_embeddings": 131072, "sliding_window": 4096, "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10_000.0, "query_pre_attn_scalar": 256,
            "sliding_window_pattern": 6, "rms_norm_eps": 1e-6, "head_dim": 256,
            "tie_word_embeddings": True}


def _ropes(hf: dict) -> tuple[dict, float]:
    """``(the global layers' rope dict, the local layers' base)``: transformers 5's
    ``rope_parameters`` per layer type, or the older ``rope_theta`` + ``rope_scaling`` +
    ``rope_local_base_freq``.

    Raises:
        DesignError: a local rope other than the default, by key."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get("full_attention"), dict):
        local = params.get("sliding_attention") or {}
        if local.get("rope_type", "default") != "default":
            raise DesignError(f"rope_parameters.sliding_attention.rope_type="
                              f"{local['rope_type']!r}: the local layers' rope is the default")
        return dict(params["full_attention"]), float(local.get(
            "rope_theta", DEFAULTS["rope_local_base_freq"]))
    glob = dict(hf.get("rope_scaling") or {})
    glob.setdefault("rope_theta", hf.get("rope_theta", DEFAULTS["rope_theta"]))
    return glob, float(hf.get("rope_local_base_freq", DEFAULTS["rope_local_base_freq"]))


# transformers' Gemma3TextConfig defaults (5.x, ``models/gemma3/configuration_gemma3.py``): a
# multimodal file's ``text_config`` writes only the keys that differ from them (gemma-3-4b-it's
# has no ``num_attention_heads``)
TEXT_DEFAULTS = {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
                 "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                 "head_dim": 256, "max_position_embeddings": 131_072, "rms_norm_eps": 1e-6,
                 "tie_word_embeddings": True, "query_pre_attn_scalar": 256,
                 "sliding_window": 4096}


def with_defaults(hf: dict) -> dict:
    """A Gemma 3 text config with each key it leaves out at transformers' default
    (``TEXT_DEFAULTS``), as ``Gemma3TextConfig`` reads it."""
    return {**TEXT_DEFAULTS, **hf}


def fields(hf: dict) -> tuple[dict[str, Any], dict]:
    """``(ModelConfig fields except the RoPE's, the global rope dict)`` of a Gemma 3 text config;
    ``zoo.hf_config.fields_from_hf`` reads the rope dict as it reads any (``_rope``).

    Raises:
        DesignError: logit soft-capping, bidirectional attention, attention biases or an
            activation other than GELU-tanh, by key.
    """
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if hf.get(key) is not None:
            raise DesignError(f"{key}={hf[key]}: logit soft-capping is not modelled")
    for key in ("use_bidirectional_attention", "attention_bias"):
        if hf.get(key):
            raise DesignError(f"{key}=true is not modelled for model_type=gemma3_text")
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise DesignError(f"hidden_activation={act!r}: Gemma 3's GeGLU is gelu_pytorch_tanh")
    n = hf["num_hidden_layers"]
    # the older files: every pattern-th layer global
    every = hf.get("sliding_window_pattern", DEFAULTS["sliding_window_pattern"])
    kinds = lt.letters(hf.get("layer_types") or f"{every - 1}:1", n)
    glob, local_theta = _ropes(hf)
    window = hf.get("sliding_window", DEFAULTS["sliding_window"])
    local = window is not None and lt.LOCAL in kinds
    return dict(
        ffn_type="geglu", norm="rmsnorm1p", sandwich_norm=True, embed_scale=True, qk_norm="head",
        attn_scale=float(hf.get("query_pre_attn_scalar", DEFAULTS["query_pre_attn_scalar"]))
        ** -0.5,
        rope_local_theta=local_theta if local else None,
        sliding_window=int(window) if local else None,
        layer_types=kinds if local else "",  # (ModelConfig canonicalises)
        tie_embeddings=bool(hf.get("tie_word_embeddings", DEFAULTS["tie_word_embeddings"])),
        head_dim=hf.get("head_dim") or DEFAULTS["head_dim"],
        norm_eps=float(hf.get("rms_norm_eps", DEFAULTS["rms_norm_eps"])),
    ), glob


def to_hf(cfg: Any, hf: dict) -> dict:
    """A Gemma-3-kind design (``sandwich_norm``) as its ``gemma3_text`` config, on the common
    keys ``hf`` (``zoo.hf_config.to_hf``'s).

    Raises:
        DesignError: a design Gemma 3 does not hold (another norm or FFN, no embedding scale, no
            per-head QK-norm, biases, sinks)."""
    want = dict(norm="rmsnorm1p", ffn_type="geglu", embed_scale=True, qk_norm="head",
                qkv_bias=False, out_bias=False, attn_sinks=False, n_experts=0)
    bad = [f"{k}={getattr(cfg, k)!r}" for k, v in want.items() if getattr(cfg, k) != v]
    if bad:
        raise DesignError(f"sandwich_norm with {', '.join(bad)}: no Gemma 3 config holds it")
    out = {k: v for k, v in hf.items() if k not in ("hidden_act", "rope_theta", "rope_scaling")}
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta, **(cfg.rope_scaling or {})}
    scalar = (cfg.attn_scale or cfg.head_dim ** -0.5) ** -2
    out.update(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"],
               hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=round(scalar, 6),
               sliding_window=cfg.sliding_window or cfg.max_seq_len,
               layer_types=lt.to_hf(cfg) if cfg.sliding_window else
               ["full_attention"] * cfg.n_layers,
               rope_parameters={"full_attention": rope, "sliding_attention": {
                   "rope_type": "default",
                   "rope_theta": cfg.rope_local_theta or cfg.rope_theta}},
               attn_logit_softcapping=None, final_logit_softcapping=None, attention_bias=False)
    return out
