"""Hugging Face ``config.json`` in and out: a Llama, Mistral, Qwen2 or Qwen3 config, or a
Mixtral, Qwen3-MoE or OLMoE mixture of experts, read into a ``ModelConfig`` (both the old and
the current ``transformers`` layouts), and a design written as its family's config (the
``transformers`` peer of a benchmark). ``ModelConfig.from_hf`` and ``ModelConfig.to_hf`` call
these; they work on a design's fields as a dict, so this module needs nothing of ``zoo.config``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import hf_deepseek, hf_gemma
from . import layer_types as lt
from .errors import DesignError
from .formats import weight_format_of_hf
from .hf_checks import DTYPES, check_types
from .rope_scaling import ROPE_TYPES

# transformers' config defaults (5.x) for the keys a config.json may lack
HF_DEFAULTS = {"llama": {"max_position_embeddings": 2048},
               "mistral": {"max_position_embeddings": 4096 * 32, "sliding_window": 4096},
               "qwen2": {"max_position_embeddings": 32768, "sliding_window": 4096,
                         "max_window_layers": 28},
               "qwen3": {"max_position_embeddings": 32768, "sliding_window": 4096,
                         "max_window_layers": 28},
               "mixtral": {"max_position_embeddings": 4096 * 32, "sliding_window": None},
               "qwen3_moe": {"max_position_embeddings": 32768, "sliding_window": 4096,
                             "max_window_layers": 28, "norm_topk_prob": False},
               "olmoe": {"max_position_embeddings": 4096, "norm_topk_prob": False},
               "gemma3_text": {"max_position_embeddings": 131072},  # the rest: zoo.hf_gemma
               "deepseek_v2": {"max_position_embeddings": 2048}}  # the rest: zoo.hf_deepseek
MODEL_TYPES = tuple(HF_DEFAULTS)
MOE_TYPES = ("mixtral", "qwen3_moe", "olmoe")
# RMSNorm of queries and keys: Qwen3's per head, OLMoE's over the projections
QK_NORM = {"qwen3": "head", "qwen3_moe": "head", "olmoe": "full", "gemma3_text": "head"}


def _windows(hf: dict, mt: str, n_layers: int) -> dict[str, Any]:
    """``sliding_window`` and ``layer_types`` (``zoo.layer_types``) of the sliding-window
    attention an HF config sets, as transformers 5 reads it: Mistral and Mixtral slide every
    layer (``sliding_window``, 4096 when the key is absent from a Mistral file; ``null`` for
    none); Qwen2 / Qwen3 / Qwen3-MoE only with ``use_sliding_window``, then Qwen3-MoE every
    layer and Qwen2 / Qwen3 the layers of their ``layer_types`` list (where the file has none,
    those from ``max_window_layers`` on); Llama and OLMoE never.

    Raises:
        DesignError: a layer type other than ``full_attention`` / ``sliding_attention``; a
            ``sliding_window`` of 0 where a window applies.
    """
    w = hf["sliding_window"] if "sliding_window" in hf else HF_DEFAULTS[mt].get("sliding_window")
    qwen = mt in ("qwen2", "qwen3", "qwen3_moe")
    applies = mt not in ("llama", "olmoe") and (not qwen or hf.get("use_sliding_window"))
    if w == 0 and applies:
        raise DesignError("sliding_window=0 is not a window (no window is null)")
    if not w or not applies:
        return {"sliding_window": None, "layer_types": ""}
    types = hf.get("layer_types")
    if mt in ("qwen2", "qwen3") and types:
        kinds = lt.letters(types, n_layers)
    elif mt in ("qwen2", "qwen3"):
        first = hf.get("max_window_layers", HF_DEFAULTS[mt]["max_window_layers"])
        kinds = "".join(lt.LOCAL if i >= first else lt.GLOBAL for i in range(n_layers))
    else:
        kinds = lt.LOCAL * n_layers
    if lt.LOCAL not in kinds:
        return {"sliding_window": None, "layer_types": ""}
    return {"sliding_window": int(w), "layer_types": kinds}  # (ModelConfig canonicalises)


def _windows_to_hf(cfg: Any, family: str, hf: dict) -> None:
    """Write a windowed design's attention pattern into its family's ``hf`` dict (in place):
    Mistral / Mixtral / Qwen3-MoE a window on every layer, Qwen2 / Qwen3 any pattern.

    Raises:
        DesignError: a pattern the design's family cannot hold (local and global layers on a
            Llama / Mistral / Mixtral / Qwen3-MoE / OLMoE design)."""
    uniform = all(cfg.layer_window(i) for i in range(cfg.n_layers))
    if family == "llama" and uniform and not (cfg.qkv_bias or cfg.out_bias):  # (no bias there)
        family = hf["model_type"] = "mistral"
        hf["architectures"] = [ARCHITECTURES[family]]
    if family in ("qwen2", "qwen3") or (family == "qwen3_moe" and uniform):
        hf.update(use_sliding_window=True, sliding_window=cfg.sliding_window, max_window_layers=0)
        if family != "qwen3_moe":
            hf["layer_types"] = lt.to_hf(cfg)
    elif family in ("mistral", "mixtral") and uniform:
        hf["sliding_window"] = cfg.sliding_window
    else:
        raise DesignError(f"layer_types={cfg.layer_types!r}, sliding_window="
                          f"{cfg.sliding_window}: no Hugging Face {family} config holds these "
                          "windows (Mistral: every layer, no biases; Qwen2 / Qwen3: any pattern)")


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


def fields_from_hf(path_or_dict: str | Path | dict, weight_dtype: str | None = None
                   ) -> tuple[dict[str, Any], dict]:
    """``(ModelConfig fields, the parsed config)`` of a Hugging Face ``config.json`` of the
    Llama, Mistral, Qwen2 or Qwen3 families, or a Mixtral, Qwen3-MoE or OLMoE mixture of experts
    (``_moe_fields`` reads the experts, ``_windows`` the sliding-window layers).

    Args:
        path_or_dict: a ``config.json`` path, a folder holding one, or the parsed dict.
        weight_dtype: the weight format to take in place of its ``quantization_config``'s.

    Both layouts of the RoPE settings are read: the one ``transformers`` >= 5 writes
    (``rope_parameters: {rope_type, rope_theta, factor, ...}``) and the older top-level
    ``rope_theta`` + ``rope_scaling``; where the file is silent or says two things, it is
    read as transformers 5 reads it (``HF_DEFAULTS``, ``_rope``, ``_windows``).

    Raises:
        DesignError: a file that is not JSON or not one object, a key of the wrong type
            (``zoo.hf_checks``), another ``model_type``, or a config that uses features the zoo does
            not model (sliding-window attention within the design's ``max_seq_len``, checked
            after the overrides; a rope type other than default and llama3; Llama/Mistral
            ``attention_bias`` or ``mlp_bias``; non-SiLU activation), naming the key; a key
            its family always writes (``hidden_size``, ``num_experts_per_tok``,
            ``moe_intermediate_size``, ...) missing, naming it.
    """
    if isinstance(path_or_dict, dict):
        hf, where = path_or_dict, "config.json"
        name = hf.get("_name_or_path") or hf.get("model_type", "hf")
    else:
        p = Path(path_or_dict)
        if p.is_dir():
            p = p / "config.json"
        try:
            hf = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DesignError(f"{p}: not a JSON file ({e})") from None
        if not isinstance(hf, dict):
            raise DesignError(f"{p}: a config.json holds one JSON object of keys, not a "
                              f"{type(hf).__name__}")
        name, where = hf.get("_name_or_path") or p.parent.name, str(p)
    if hf.get("model_type") in MODEL_TYPES:  # another family is refused as such (_fields)
        check_types(hf, where)
    try:
        (fields, hf), qc = _fields(hf, name), hf.get("quantization_config")
        return {**fields, "weight_dtype": weight_dtype or weight_format_of_hf(qc)}, hf
    except KeyError as e:  # a key every file of its family holds, missing: named
        raise DesignError(f"config.json (model_type={hf.get('model_type')}) has no "
                          f"{e.args[0]!r}, which its family always writes") from None


def _fields(hf: dict, name: str) -> tuple[dict[str, Any], dict]:
    """``fields_from_hf`` on the parsed config ``hf`` (``name``: its model's name); a key its
    family always writes, missing: ``KeyError``."""
    mt = hf.get("model_type")
    if mt not in MODEL_TYPES:
        inner = (hf.get("text_config") or {}).get("model_type")  # a multimodal wrapper's
        raise DesignError(f"model_type={mt!r} is not supported: ModelConfig.from_hf reads "
                          f"{', '.join(MODEL_TYPES)}" + (
                              f"; its text_config (model_type={inner!r}, the language model "
                              "alone) is: a config.json of its own" if inner in MODEL_TYPES else ""))
    hf = hf_gemma.with_defaults(hf) if mt == "gemma3_text" else hf  # a text_config's omissions
    gemma, gemma_rope = hf_gemma.fields(hf) if mt == "gemma3_text" else ({}, None)
    if mt != "gemma3_text" and hf.get("hidden_act", "silu") != "silu":
        raise DesignError(f"hidden_act={hf['hidden_act']!r}: these families use silu (SwiGLU)")
    if hf.get("mlp_bias"):
        raise DesignError(f"mlp_bias=true (biases on the MLP projections) is not modelled by "
                          f"the zoo for model_type={mt}")
    if mt not in ("qwen2", "llama") and hf.get("attention_bias"):  # (Qwen2's q/k/v biases are
        raise DesignError(f"attention_bias=true (biases on q/k/v/o projections) is not "  # its
                          f"modelled by the zoo for model_type={mt}")  # own, never an o bias)
    if hf.get("clip_qkv") is not None:
        raise DesignError(f"clip_qkv={hf['clip_qkv']} (q, k, v clamped) is not modelled")
    max_pos = int(hf.get("max_position_embeddings") or HF_DEFAULTS[mt]["max_position_embeddings"])
    rope_theta, rs = _rope({"rope_parameters": gemma_rope} if gemma else hf, max_pos)
    n_heads = hf["num_attention_heads"]
    d_model = hf["hidden_size"]
    dtype = DTYPES[hf.get("torch_dtype") or hf.get("dtype") or "bfloat16"]
    out = dict(
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
        out_bias=mt == "llama" and bool(hf.get("attention_bias", False)),  # Llama's o_proj too
        dtype=dtype,
        kv_dtype=dtype,
        qk_norm=QK_NORM.get(mt, "none"),
        **(_moe_fields(hf, mt) if mt in MOE_TYPES else {}),
        **(_windows(hf, mt, hf["num_hidden_layers"]) if not gemma else {}),
    )
    out.update(gemma)  # Gemma 3's own (zoo.hf_gemma)
    if mt == "deepseek_v2":  # MLA and DeepSeekMoE (zoo.hf_deepseek)
        out.update(hf_deepseek.fields(hf, rs))
    return out, hf


def _moe_fields(hf: dict, mt: str) -> dict[str, Any]:
    """The mixture-of-experts fields of a Mixtral, Qwen3-MoE or OLMoE config: experts
    (``num_local_experts`` or ``num_experts``, in either family), top-k
    (``num_experts_per_tok``), the expert width (Qwen3-MoE's ``moe_intermediate_size``, else
    ``intermediate_size``), the renormalised top-k
    (Mixtral always; the others' ``norm_topk_prob``), Qwen3-MoE's dense first layers
    (``mlp_only_layers`` 0..k-1).

    Raises:
        DesignError: what the zoo does not run, by key: Qwen3-MoE's ``decoder_sparse_step`` other
            than 1, ``mlp_only_layers`` that are not the first layers.
    """
    # transformers 5 writes Mixtral's and Qwen3-MoE's count as num_local_experts (its attribute
    # map), the published Qwen3-MoE and OLMoE files num_experts: either is read
    n = hf.get("num_local_experts") or hf.get("num_experts")
    if not n:
        raise DesignError(f"model_type={mt} without num_local_experts / num_experts")
    width = hf["moe_intermediate_size"] if mt == "qwen3_moe" else hf["intermediate_size"]
    renorm = True if mt == "mixtral" else bool(hf.get("norm_topk_prob",
                                                      HF_DEFAULTS[mt]["norm_topk_prob"]))
    first = 0
    if mt == "qwen3_moe":
        if hf.get("decoder_sparse_step", 1) != 1:
            raise DesignError(f"decoder_sparse_step={hf['decoder_sparse_step']}: MoE layers at "
                              "a stride are not modelled (every layer from first_k_dense on)")
        dense = sorted(hf.get("mlp_only_layers") or [])
        if dense != list(range(len(dense))):
            raise DesignError(f"mlp_only_layers={dense}: only the first layers may be dense "
                              "(first_k_dense)")
        first = len(dense)
    return dict(n_experts=int(n), n_experts_active=int(hf["num_experts_per_tok"]),
                expert_ffn_dim=int(width), router_renorm=renorm, first_k_dense=first)


def _family(cfg: Any) -> str:
    """The HF family a design is written as: its own where that family can hold it, else the
    one that can (a mixture of experts: Qwen3-MoE with per-head QK-norm, OLMoE with QK-norm over
    the projections, Mixtral without; a dense design with per-head QK-norm: Qwen3; q/k/v biases:
    Qwen2; else Llama).

    Raises:
        DesignError: a design no family holds (QK-norm over the projections on a dense design,
            shared experts, an MoE mix of QK-norm, renormalisation and dense layers none has).
    """
    if cfg.kv_lora_rank or cfg.n_shared_experts:
        raise DesignError("kv_lora_rank / n_shared_experts: DeepSeek-V2 configs are read, not "
                          "written yet (no transformers peer)")
    if cfg.attn_sinks:
        raise DesignError("attn_sinks: no Hugging Face family here (gpt-oss's comes with its "
                          "mixture of experts, not modelled)")
    if cfg.out_bias:
        if cfg.n_experts or cfg.qk_norm != "none" or not cfg.qkv_bias:
            raise DesignError("out_bias: only Llama's attention_bias (q/k/v and o biases on a "
                              "dense design without QK-norm) holds it")
        return "llama"
    if cfg.n_experts and cfg.qkv_bias:
        raise DesignError("qkv_bias with n_experts > 0: no Hugging Face MoE family here has "
                          "q/k/v biases")
    if cfg.n_experts:
        if cfg.qk_norm == "head":
            return "qwen3_moe"
        if cfg.qk_norm == "full" and not cfg.router_renorm and not cfg.first_k_dense:
            return "olmoe"
        if cfg.qk_norm == "none" and cfg.router_renorm and not cfg.first_k_dense:
            return "mixtral"
        raise DesignError(f"no Hugging Face family holds this mixture of experts (qk_norm="
                          f"{cfg.qk_norm}, router_renorm={cfg.router_renorm}, first_k_dense="
                          f"{cfg.first_k_dense})")
    if cfg.qk_norm == "full":
        raise DesignError("qk_norm=full on a dense design: no Hugging Face family here")
    if cfg.qk_norm == "head":
        if cfg.qkv_bias:
            raise DesignError("qk_norm=head with qkv_bias: no Hugging Face family holds it")
        return "qwen3"
    family = cfg.family if cfg.family in ("llama", "mistral", "qwen2") else "llama"
    return "qwen2" if cfg.qkv_bias else family


ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                 "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                 "olmoe": "OlmoeForCausalLM"}


def _common_hf(cfg: Any) -> dict[str, Any]:
    """The keys every family's ``config.json`` shares, of design ``cfg``."""
    return {
        "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim, "intermediate_size": cfg.ffn_dim,
        "vocab_size": cfg.vocab_size, "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta, "max_position_embeddings": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings, "hidden_act": "silu",
        "torch_dtype": {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[cfg.dtype],
    }


def to_hf(cfg: Any) -> dict[str, Any]:
    """A design (a ``ModelConfig``) as a Hugging Face ``config.json`` dict of its family (llama,
    mistral, qwen2, qwen3, mixtral, qwen3_moe, olmoe: ``_family``).

    Used to build the ``transformers`` peer of a design. Only rmsnorm + SwiGLU designs have an
    HF equivalent.

    Raises:
        DesignError: for a design with no HF equivalent (gelu FFN, layernorm, ``_family``'s).
    """
    if cfg.sandwich_norm:  # Gemma 3's layout
        return hf_gemma.to_hf(cfg, _common_hf(cfg))
    if cfg.ffn_type != "swiglu" or cfg.norm != "rmsnorm":
        raise DesignError("only rmsnorm + swiglu designs have a Hugging Face equivalent")
    family = _family(cfg)
    hf = {"model_type": family, "architectures": [ARCHITECTURES[family]], **_common_hf(cfg)}
    if family in ("llama", "qwen3", "qwen3_moe", "olmoe"):
        hf["attention_bias"] = False
    if family == "llama":
        hf["attention_bias"] = cfg.out_bias
        hf["mlp_bias"] = False
    if family in ("mistral", "mixtral"):
        hf["sliding_window"] = None
    if family in ("qwen2", "qwen3", "qwen3_moe"):
        hf["use_sliding_window"] = False
    if family == "mixtral":
        hf.update(num_local_experts=cfg.n_experts, intermediate_size=cfg.expert_ffn_dim)
    if family in ("qwen3_moe", "olmoe"):
        hf.update(num_experts=cfg.n_experts, norm_topk_prob=cfg.router_renorm)
    if family == "olmoe":
        hf.update(intermediate_size=cfg.expert_ffn_dim, clip_qkv=None)
    if family == "qwen3_moe":
        hf.update(moe_intermediate_size=cfg.expert_ffn_dim, decoder_sparse_step=1,
                  mlp_only_layers=list(range(cfg.first_k_dense)))
    if cfg.n_experts:
        hf["num_experts_per_tok"] = cfg.n_experts_active
    if cfg.rope_scaling:
        hf["rope_scaling"] = dict(cfg.rope_scaling)
    if cfg.windowed:
        _windows_to_hf(cfg, family, hf)
    return hf
