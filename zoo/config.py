"""ModelConfig: one decoder-only transformer design, its validation, and Hugging Face config import.

A design is data: every model variant in the zoo is a ``ModelConfig``, never a copy of code
(gpt-fast ``ModelArgs``, torchtitan model args). Real models are presets read from their published
``config.json`` files, shipped in ``zoo/configs/``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .formats import DTYPE_BYTES, DTYPES, KV_DTYPES, WEIGHT_FORMATS  # noqa: F401

CONFIG_DIR = Path(__file__).parent / "configs"

FFN_TYPES = ("swiglu", "gelu")
NORMS = ("rmsnorm", "layernorm")
KERNELS = ("auto", "torch", "triton")


class DesignError(ValueError):
    """A design that cannot be built. The message names the offending field."""


@dataclass
class ModelConfig:
    """Shape and numerics of one decoder-only transformer.

    Sizes are counts (no units). ``head_dim`` may differ from ``d_model // n_heads`` (as in Gemma or
    Qwen3); ``n_kv_heads`` sets grouped-query attention (GQA, Ainslie et al. 2023,
    arXiv:2305.13245): ``n_kv_heads == n_heads`` is multi-head attention (MHA), ``n_kv_heads == 1``
    is multi-query attention (MQA, Shazeer 2019, arXiv:1911.02150).

    ``rope_scaling`` holds Llama-3's frequency rescaling (``{"rope_type": "llama3", "factor": ...,
    "low_freq_factor": ..., "high_freq_factor": ..., "original_max_position_embeddings": ...}``)
    or ``None``.

    ``kernels``: ``triton`` (the fused kernels of ``kernels/``), ``torch`` (PyTorch ops), or
    ``auto``, the default: the fastest correct path of the device it is built for (``resolved``:
    Triton on a CUDA GPU, torch on a CPU; a quantized KV cache always needs Triton).
    """

    name: str = "custom"
    d_model: int = 2048
    n_layers: int = 16
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int = 64
    ffn_dim: int = 8192
    ffn_type: str = "swiglu"
    vocab_size: int = 128256
    norm: str = "rmsnorm"
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: dict | None = None
    max_seq_len: int = 8192
    tie_embeddings: bool = False
    qkv_bias: bool = False
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    weight_dtype: str = "auto"  # WEIGHT_FORMATS: auto = dtype; others predicted only
    kernels: str = "auto"
    family: str = "llama"
    extra: dict = field(default_factory=dict)

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query projection output, ``n_heads * head_dim``."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of each of the key and value projection outputs, ``n_kv_heads * head_dim``."""
        return self.n_kv_heads * self.head_dim

    @property
    def weight_bits(self) -> float:
        """Bits per weight of the linear layers and embeddings (``weight_dtype``, scales
        included; ``auto``: the model dtype's)."""
        bits = WEIGHT_FORMATS.get(self.weight_dtype)
        return 8.0 * DTYPE_BYTES[self.dtype] if bits is None else bits

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head (1 for MHA, ``n_heads`` for MQA)."""
        return self.n_heads // self.n_kv_heads

    # ---- validation ----------------------------------------------------------------------
    def validate(self, device: dict | None = None) -> ModelConfig:
        """Refuse impossible designs before any tensor is allocated.

        Args:
            device: optional facts about the target device, ``{"type": "cuda"|"cpu",
                "compute_capability": (major, minor)}``. bf16 needs compute capability >= 8.0 on
                CUDA; fp8 KV needs >= 8.9.

        Returns:
            ``self``, so ``cfg.validate().to_dict()`` chains.

        Raises:
            DesignError: with a message that names the field and the rule it breaks.
        """
        for f in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim",
                  "vocab_size", "max_seq_len"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise DesignError(f"{f} must be a positive integer, got {v!r}")
        if self.n_kv_heads > self.n_heads:
            raise DesignError(
                f"n_kv_heads ({self.n_kv_heads}) must not exceed n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise DesignError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads}) "
                "for grouped-query attention")
        if self.head_dim % 2:
            raise DesignError(
                f"head_dim ({self.head_dim}) must be even: RoPE rotates pairs of channels")
        if not (self.norm_eps > 0 and math.isfinite(self.norm_eps)):
            raise DesignError(f"norm_eps must be a positive finite number, got {self.norm_eps!r}")
        if not (self.rope_theta > 0 and math.isfinite(self.rope_theta)):
            raise DesignError(f"rope_theta must be positive, got {self.rope_theta!r}")
        _choice("dtype", self.dtype, DTYPES)
        _choice("kv_dtype", self.kv_dtype, KV_DTYPES)
        _choice("ffn_type", self.ffn_type, FFN_TYPES)
        _choice("norm", self.norm, NORMS)
        _choice("kernels", self.kernels, KERNELS)
        _choice("weight_dtype", self.weight_dtype, tuple(WEIGHT_FORMATS))
        if device and self.weight_dtype not in ("auto", self.dtype):
            raise DesignError(
                f"weight_dtype={self.weight_dtype} is predicted only: the zoo's kernels run "
                f"{self.dtype} weights (price it with study.predict=true or python -m "
                "sweep.cli.whatif)")
        if self.kv_dtype in ("int8", "fp8_e4m3") and self.kernels == "torch":
            raise DesignError(
                f"kv_dtype={self.kv_dtype} needs kernels='triton' (the quantized-cache attention "
                "kernels live in kernels/); got kernels='torch'")
        if self.kv_dtype in ("bf16", "fp16", "fp32") and self.kv_dtype != self.dtype:
            raise DesignError(
                f"kv_dtype ({self.kv_dtype}) must equal dtype ({self.dtype}) unless it is a "
                "quantized cache (int8, fp8_e4m3)")
        if (device and device.get("type") == "cpu" and self.kernels == "triton"
                and os.environ.get("TRITON_INTERPRET") != "1"):
            raise DesignError("kernels=triton needs a CUDA GPU (or TRITON_INTERPRET=1, the Triton "
                              "interpreter, for tests)")
        if device and device.get("type") == "cuda" and device.get("compute_capability"):
            cc = tuple(device["compute_capability"])
            name = device.get("name", "this GPU")
            if "bf16" in (self.dtype, self.kv_dtype) and cc < (8, 0):
                raise DesignError(
                    f"dtype=bf16 needs compute capability >= 8.0; {name} has {cc[0]}.{cc[1]}")
            if self.kv_dtype == "fp8_e4m3" and cc < (8, 9):
                raise DesignError(
                    f"kv_dtype=fp8_e4m3 needs compute capability >= 8.9; {name} has "
                    f"{cc[0]}.{cc[1]}")
        return self

    # ---- conversions ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-safe)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a dict of field values; unknown keys raise ``DesignError`` naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise DesignError(f"unknown ModelConfig field(s): {', '.join(unknown)}")
        return cls(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()})

    def resolved(self, device_type: str) -> ModelConfig:
        """This design with ``kernels='auto'`` made concrete for ``device_type`` (``cuda``: Triton;
        otherwise torch, unless the KV cache is quantized: Triton); other values unchanged."""
        if self.kernels != "auto":
            return self
        quantized = self.kv_dtype in ("int8", "fp8_e4m3")
        return self.replace(kernels="triton" if device_type == "cuda" or quantized else "torch")

    def replace(self, **overrides: Any) -> ModelConfig:
        """A copy with some fields changed (unknown fields raise ``DesignError``)."""
        d = self.to_dict()
        d.update(overrides)
        return ModelConfig.from_dict(d)

    @classmethod
    def from_hf(cls, path_or_dict: str | Path | dict, **overrides: Any) -> ModelConfig:
        """Read a Hugging Face ``config.json`` of the Llama, Mistral or Qwen2 families.

        Args:
            path_or_dict: a ``config.json`` path, a folder holding one, or the parsed dict.
            overrides: ModelConfig fields to set after import (e.g. ``max_seq_len=4096``).

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
        cfg = cls(
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
        )
        cfg = cfg.replace(**overrides) if overrides else cfg
        window, key = _sliding_window(hf, mt, cfg.n_layers)
        if window is not None and cfg.max_seq_len > window:
            raise DesignError(
                f"{key}={window}: sliding-window attention is not modelled, and a design of "
                f"max_seq_len {cfg.max_seq_len} would attend past the window (from_hf(..., "
                f"max_seq_len={window}) keeps every position within it)")
        return cfg

    def to_hf(self) -> dict[str, Any]:
        """This design as a Hugging Face ``config.json`` dict of its family (llama, mistral, qwen2).

        Used to build the ``transformers`` peer of a design. Only rmsnorm + SwiGLU designs have an
        HF equivalent.

        Raises:
            DesignError: for a design with no HF equivalent (gelu FFN, layernorm).
        """
        if self.ffn_type != "swiglu" or self.norm != "rmsnorm":
            raise DesignError("only rmsnorm + swiglu designs have a Hugging Face equivalent")
        family = self.family if self.family in ("llama", "mistral", "qwen2") else "llama"
        if self.qkv_bias and family != "qwen2":
            family = "qwen2"
        hf = {
            "model_type": family,
            "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                               "qwen2": "Qwen2ForCausalLM"}[family]],
            "hidden_size": self.d_model, "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads, "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim, "intermediate_size": self.ffn_dim,
            "vocab_size": self.vocab_size, "rms_norm_eps": self.norm_eps,
            "rope_theta": self.rope_theta, "max_position_embeddings": self.max_seq_len,
            "tie_word_embeddings": self.tie_embeddings, "hidden_act": "silu",
            "torch_dtype": {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[self.dtype],
        }
        if family == "llama":
            hf["attention_bias"] = self.qkv_bias
            hf["mlp_bias"] = False
        if family == "mistral":
            hf["sliding_window"] = None
        if family == "qwen2":
            hf["use_sliding_window"] = False
        if self.rope_scaling:
            hf["rope_scaling"] = dict(self.rope_scaling)
        return hf

    @classmethod
    def from_name(cls, name: str, **overrides: Any) -> ModelConfig:
        """A shipped preset by name: ``tiny`` or a ``zoo/configs/<name>.json`` (see ``presets()``).

        Raises:
            DesignError: for an unknown name, listing the known ones.
        """
        if name == "tiny":
            return TINY.replace(**overrides)
        p = CONFIG_DIR / f"{name}.json"
        if not p.exists():
            raise DesignError(f"unknown model preset {name!r}; known: {', '.join(presets())}")
        return cls.from_hf(p, name=name, **overrides)


def presets() -> list[str]:
    """Names of the shipped model presets."""
    return ["tiny"] + sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


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


def _choice(field_name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise DesignError(f"{field_name}={value!r} is not one of {', '.join(allowed)}")


# A CPU-sized Llama-style model: the default design space runs on it when no GPU is present.
TINY = ModelConfig(
    name="tiny", d_model=128, n_layers=2, n_heads=8, n_kv_heads=2, head_dim=16, ffn_dim=352,
    vocab_size=512, rope_theta=10000.0, max_seq_len=256, tie_embeddings=False, dtype="fp32",
    kv_dtype="fp32",
)
