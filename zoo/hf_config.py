"""Hugging Face ``config.json`` in and out: a Llama, Mistral or Qwen2 config read into a
``ModelConfig`` (both the old and the current ``transformers`` layouts), and a design written as
its family's config (the ``transformers`` peer of a benchmark). ``ModelConfig.from_hf`` and
``ModelConfig.to_hf`` call these; they work on a design's fields as a dict, so this module needs
nothing of ``zoo.config``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import DesignError

ROPE_TYPES = ("default", "llama3")


# transformers' config defaults (5.x) for the keys a config.json may lack
HF_DEFAULTS = {"llama": {"max_position_embeddings": 2048},
               "mistral": {"max_position_embeddings": 4096 * 32, "sliding_window": 4096},
               "qwen2": {"max_position_embeddings": 32768, "sliding_window": 4096,
                         "max_window_layers": 28}}


def _sliding_window(hf: dict, mt: str, n_layers: int) -> tuple[int | None, str]:
    """``(window, key)`` of the sliding-window attention an HF config sets, as transformers reads
    it, or ``(None, "")`` where every layer attends fully: Mistral slides every layer
    (``sliding_window``, 4096 when the key is absent; ``null`` for none); Qwen2 slides the layers
    from ``max_window_layers`` on when ``use_sliding_window`` (none when that is past the last
    layer)."""
    d = HF_DEFAULTS[mt]
    if mt == "mistral":
        w = hf["sliding_window"] if "sliding_window" in hf else d["sliding_window"]
        return (int(w), "sliding_window") if w else (None, "")
    if mt == "qwen2" and hf.get("use_sliding_window"):
        first = hf.get("max_window_layers", d["max_window_layers"])
        w = hf.get("sliding_window", d["sliding_window"])
        if first < n_layers and w:
            return int(w), f"use_sliding_window (layers {first}..{n_layers - 1}), sliding_window"
    return None, ""


def _rope(hf: dict, max_pos: int) -> tuple[float, dict | None]:
    """``(rope_theta, rope_scaling)`` from an HF config in either layout (see ``from_hf``), read
    as transformers 5 reads it: ``rope_scaling`` over ``rope_parameters`` when a file has both, a
    top-level ``original_max_position_embeddings`` over the one in the dict, and a llama3 rope
    without one taking ``max_position_embeddings`` (``max_pos``).

    Raises:
        DesignError: a rope type the zoo does not implement, or per-layer-type parameters.
    """
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        raise DesignError(f"rope_parameters per layer type ({', '.join(params)}) are not modelled")
    legacy = hf.get("rope_scaling")
    key = "rope_scaling" if isinstance(legacy, dict) and legacy else "rope_parameters"
    scaling = dict(legacy) if key == "rope_scaling" else dict(params or {})
    theta = float(scaling.pop("rope_theta", hf.get("rope_theta", (params or {}).get(
        "rope_theta", 10000.0))))
    rtype = scaling.get("rope_type", scaling.get("type", "default"))
    if rtype not in ROPE_TYPES:
        raise DesignError(f"{key} type {rtype!r} is not implemented by the zoo (rope types: "
                          f"{', '.join(ROPE_TYPES)})")
    if rtype == "default":
        return theta, None
    scaling.pop("type", None)
    if hf.get("original_max_position_embeddings"):
        scaling["original_max_position_embeddings"] = int(hf["original_max_position_embeddings"])
    scaling.setdefault("original_max_position_embeddings", max_pos)
    return theta, dict(scaling, rope_type=rtype)


def fields_from_hf(path_or_dict: str | Path | dict) -> tuple[dict[str, Any], dict]:
    """``(ModelConfig fields, the parsed config)`` of a Hugging Face ``config.json`` of the
    Llama, Mistral or Qwen2 families (``check_window`` then checks the design built from them).

    Args:
        path_or_dict: a ``config.json`` path, a folder holding one, or the parsed dict.

    Both layouts of the RoPE settings are read: the one ``transformers`` >= 5 writes
    (``rope_parameters: {rope_type, rope_theta, factor, ...}``) and the older top-level
    ``rope_theta`` + ``rope_scaling``; where the file is silent or says two things, it is
    read as transformers 5 reads it (``HF_DEFAULTS``, ``_rope``, ``_sliding_window``).

    Raises:
        DesignError: for another ``model_type``, or a config that uses features the zoo does
            not model (sliding-window attention within the design's ``max_seq_len``, checked
            after the overrides; a rope type other than default and llama3; Llama/Mistral
            ``attention_bias`` or ``mlp_bias``; non-SiLU activation), naming the key.
    """
    if isinstance(path_or_dict, dict):
        hf = path_or_dict
        name = hf.get("_name_or_path") or hf.get("model_type", "hf")
    else:
        p = Path(path_or_dict)
        if p.is_dir():
            p = p / "config.json"
        hf = json.loads(p.read_text())
        name = hf.get("_name_or_path") or p.parent.name
    mt = hf.get("model_type")
    if mt not in ("llama", "mistral", "qwen2"):
        raise DesignError(
            f"model_type={mt!r} is not supported: ModelConfig.from_hf reads the llama, "
            "mistral and qwen2 families")
    if hf.get("hidden_act", "silu") != "silu":
        raise DesignError(f"hidden_act={hf['hidden_act']!r}: these families use silu (SwiGLU)")
    if mt in ("llama", "mistral"):
        for key, what in (("attention_bias", "biases on q/k/v/o projections"),
                          ("mlp_bias", "biases on the MLP projections")):
            if hf.get(key):
                raise DesignError(f"{key}=true ({what}) is not modelled by the zoo for "
                                  f"model_type={mt}")
    defaults = HF_DEFAULTS[mt]  # what transformers assumes for a key the file lacks
    max_pos = int(hf.get("max_position_embeddings") or defaults["max_position_embeddings"])
    rope_theta, rs = _rope(hf, max_pos)
    n_heads = hf["num_attention_heads"]
    d_model = hf["hidden_size"]
    dtype = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(
        hf.get("torch_dtype") or hf.get("dtype") or "bfloat16", "bf16")
    return dict(
        name=str(name),
        family=mt,
        d_model=d_model,
        n_layers=hf["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        head_dim=hf.get("head_dim") or d_model // n_heads,
        ffn_dim=hf["intermediate_size"],
        ffn_type="swiglu",
        vocab_size=hf["vocab_size"],
        norm="rmsnorm",
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        rope_scaling=rs,
        max_seq_len=max_pos,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        # Qwen2's q/k/v always carry biases in transformers (``attention_bias`` unread there)
        qkv_bias=mt == "qwen2" or bool(hf.get("attention_bias", False)),
        dtype=dtype,
        kv_dtype=dtype,
    ), hf


def check_window(hf: dict, n_layers: int, max_seq_len: int) -> None:
    """Refuse a design read from ``hf`` whose layers would attend past a sliding window.

    Raises:
        DesignError: the window (and the key that sets it) is shorter than ``max_seq_len``.
    """
    window, key = _sliding_window(hf, hf.get("model_type"), n_layers)
    if window is not None and max_seq_len > window:
        raise DesignError(
            f"{key}={window}: sliding-window attention is not modelled, and a design of "
            f"max_seq_len {max_seq_len} would attend past the window (from_hf(..., "
            f"max_seq_len={window}) keeps every position within it)")


def to_hf(cfg: Any) -> dict[str, Any]:
    """A design (a ``ModelConfig``) as a Hugging Face ``config.json`` dict of its family (llama,
    mistral, qwen2).

    Used to build the ``transformers`` peer of a design. Only rmsnorm + SwiGLU designs have an
    HF equivalent.

    Raises:
        DesignError: for a design with no HF equivalent (gelu FFN, layernorm).
    """
    if cfg.ffn_type != "swiglu" or cfg.norm != "rmsnorm":
        raise DesignError("only rmsnorm + swiglu designs have a Hugging Face equivalent")
    family = cfg.family if cfg.family in ("llama", "mistral", "qwen2") else "llama"
    if cfg.qkv_bias and family != "qwen2":
        family = "qwen2"
    hf = {
        "model_type": family,
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                           "qwen2": "Qwen2ForCausalLM"}[family]],
        "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim, "intermediate_size": cfg.ffn_dim,
        "vocab_size": cfg.vocab_size, "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta, "max_position_embeddings": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings, "hidden_act": "silu",
        "torch_dtype": {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[cfg.dtype],
    }
    if family == "llama":
        hf["attention_bias"] = cfg.qkv_bias
        hf["mlp_bias"] = False
    if family == "mistral":
        hf["sliding_window"] = None
    if family == "qwen2":
        hf["use_sliding_window"] = False
    if cfg.rope_scaling:
        hf["rope_scaling"] = dict(cfg.rope_scaling)
    return hf
