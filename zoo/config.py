"""ModelConfig: one decoder-only transformer design, its validation, and Hugging Face config import.

A design is data: every model variant in the zoo is a ``ModelConfig``, never a copy of code
(gpt-fast ``ModelArgs``, torchtitan model args). Real models are presets read from their published
``config.json`` files, shipped in ``zoo/configs/``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import latent, torch_only
from . import layer_types as lt
from .errors import DesignError, closest
from .formats import DTYPE_BYTES, DTYPES, KV_DTYPES, WEIGHT_FORMATS
from .rope_scaling import check as check_rope_scaling

CONFIG_DIR = Path(__file__).parent / "configs"

NORMS = ("rmsnorm", "layernorm", "rmsnorm1p")  # rmsnorm1p: weight 1 + w (Gemma: zoo.torch_only)
# RMSNorm on the queries and keys before RoPE: none; per head over ``head_dim`` (Qwen3, Gemma 3);
# over the whole projection, ``q_dim`` and ``kv_dim`` wide (OLMo 2, OLMoE)
QK_NORMS = ("none", "head", "full")
# the registered FFN kinds' names (``zoo.ffn.register`` adds each; the package imports zoo.ffn)
FFN_TYPES: list[str] = []
KERNELS = ("auto", "torch", "triton")



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

    Mixture of experts (``zoo.moe``; dense when ``n_experts == 0``, the default): each MoE layer's
    FFN is ``n_experts`` SwiGLU experts of width ``expert_ffn_dim``, of which a softmax router
    picks ``n_experts_active`` per token (top-k; ``router_renorm``: the k weights renormalised to
    sum to 1, as Mixtral and Qwen3-MoE's ``norm_topk_prob``; OLMoE does not), plus
    ``n_shared_experts`` experts every token goes through (DeepSeek's, ungated); the first
    ``first_k_dense`` layers keep a dense FFN of ``ffn_dim``. ``qk_norm``: RMSNorm of the queries
    and keys before RoPE (``QK_NORMS``).

    Attention kinds (``zoo.layer_types``): ``sliding_window`` (positions, the token's own
    included; ``None``: none; a window of at least ``max_seq_len`` is accepted and is full
    attention) bounds what the local layers attend to, and ``layer_types`` says which layers are
    local (``"L"``/``"G"`` per layer, ``""``: all alike; a ratio ``"5:1"`` or transformers' list
    on input). ``attn_sinks``: a learned logit per query head in each softmax's denominator
    (gpt-oss's attention sinks); ``out_bias``: a bias on the output projection (gpt-oss, Llama's
    ``attention_bias``, with ``qkv_bias``). Gemma's norms, scales and local RoPE base
    (``norm="rmsnorm1p"``, ``sandwich_norm``, ``embed_scale``, ``attn_scale``,
    ``rope_local_theta``): ``zoo.torch_only``.
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
    # fields added after the first studies: in the identity only where set (``identity_dict``)
    qk_norm: str = "none"
    n_experts: int = 0
    n_experts_active: int = 0
    expert_ffn_dim: int = 0
    n_shared_experts: int = 0
    router_renorm: bool = True
    first_k_dense: int = 0
    sliding_window: int | None = None
    layer_types: str = ""
    attn_sinks: bool = False
    out_bias: bool = False
    sandwich_norm: bool = False
    embed_scale: bool = False
    attn_scale: float | None = None
    rope_local_theta: float | None = None
    q_lora_rank: int = 0  # multi-head latent attention (zoo.latent): kv_lora_rank > 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self):
        # one spelling of the pattern (a ratio or transformers' list become "L"/"G" per layer)
        if isinstance(self.n_layers, int) and self.n_layers > 0:
            self.layer_types = lt.canonical(self.layer_types, self.n_layers)

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
    def moe(self) -> bool:
        """Whether any layer's FFN is a mixture of experts (``n_experts > 0``)."""
        return self.n_experts > 0

    def layer_is_moe(self, layer: int) -> bool:
        """Whether block ``layer`` (0-based) has the MoE FFN: an MoE design's layers from
        ``first_k_dense`` on."""
        return self.moe and layer >= self.first_k_dense

    def layer_window(self, layer: int) -> int | None:
        """The window block ``layer`` (0-based) attends over, None for full attention
        (``zoo.layer_types.window``)."""
        return lt.window(self, layer)

    @property
    def windowed(self) -> bool:
        """Whether any layer attends over a window shorter than ``max_seq_len``."""
        return any(self.layer_window(i) for i in range(self.n_layers))

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
        for f in ("tie_embeddings", "qkv_bias"):
            if not isinstance(getattr(self, f), bool):
                raise DesignError(f"{f} must be true or false, got {getattr(self, f)!r}")
        check_rope_scaling(self.rope_scaling)
        _choice("qk_norm", self.qk_norm, QK_NORMS)
        lt.canonical(self.layer_types, self.n_layers)
        lt.check(self)
        torch_only.check(self)
        latent.check(self)
        self._validate_moe()
        _choice("dtype", self.dtype, DTYPES)
        _choice("kv_dtype", self.kv_dtype, KV_DTYPES)
        _choice("ffn_type", self.ffn_type, tuple(FFN_TYPES))
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

    def _validate_moe(self) -> None:
        """Refuse an impossible mixture of experts (``validate``), naming the field. (Modes: a
        torch-path MoE layer runs eagerly only, ``sweep.plan.check_mode``.)"""
        for f in ("n_experts", "n_experts_active", "expert_ffn_dim", "n_shared_experts",
                  "first_k_dense"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise DesignError(f"{f} must be a non-negative integer, got {v!r}")
        if not isinstance(self.router_renorm, bool):
            raise DesignError(f"router_renorm must be true or false, got {self.router_renorm!r}")
        if not self.moe:
            for f in ("n_experts_active", "expert_ffn_dim", "n_shared_experts", "first_k_dense"):
                if getattr(self, f):
                    raise DesignError(f"{f}={getattr(self, f)} needs n_experts > 0 (a dense "
                                      "design has n_experts = 0)")
            return
        if self.n_experts_active < 1:
            raise DesignError(f"n_experts_active must be at least 1 for n_experts="
                              f"{self.n_experts}, got {self.n_experts_active}")
        if self.n_experts_active > self.n_experts:
            raise DesignError(f"n_experts_active ({self.n_experts_active}) must not exceed "
                              f"n_experts ({self.n_experts}): top-k picks k of the experts")
        if self.expert_ffn_dim < 1:
            raise DesignError(f"expert_ffn_dim must be a positive integer for n_experts="
                              f"{self.n_experts} (each expert's hidden width), got "
                              f"{self.expert_ffn_dim}")
        if self.first_k_dense >= self.n_layers:
            raise DesignError(f"first_k_dense ({self.first_k_dense}) must be below n_layers "
                              f"({self.n_layers}): an MoE design has at least one MoE layer")
        if self.ffn_type != "swiglu":
            raise DesignError(f"ffn_type={self.ffn_type} with n_experts > 0: the experts are "
                              "SwiGLU (ffn_type=swiglu)")

    # ---- conversions ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-safe)."""
        return dataclasses.asdict(self)

    def identity_dict(self) -> dict[str, Any]:
        """``to_dict`` without the fields added after the first studies (``LATER_FIELDS``)
        where they hold their default: a study's identity (``sweep.config.identity``) names
        what changes its figures; a dense design's stays what it was before those fields came."""
        d = self.to_dict()
        for k, v in LATER_FIELDS.items():
            if d.get(k) == v:
                d.pop(k)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a dict of field values; unknown keys raise ``DesignError`` naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise DesignError(f"unknown ModelConfig field(s): {', '.join(unknown)}"
                              + closest(unknown[0], names))
        return cls(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()})

    def resolved(self, device_type: str) -> ModelConfig:
        """This design with ``kernels='auto'`` made concrete for ``device_type`` (``cuda``: Triton;
        otherwise torch, unless the KV cache is quantized: Triton); other values unchanged."""
        if self.kernels != "auto":
            return self
        quantized = self.kv_dtype in ("int8", "fp8_e4m3")
        if torch_only.features(self) and not quantized:  # Gemma's norms: zoo.torch_only
            return self.replace(kernels="torch")
        return self.replace(kernels="triton" if device_type == "cuda" or quantized else "torch")

    def replace(self, **overrides: Any) -> ModelConfig:
        """A copy with some fields changed (unknown fields raise ``DesignError``)."""
        d = self.to_dict()
        d.update(overrides)
        return ModelConfig.from_dict(d)

    @classmethod
    def from_hf(cls, path_or_dict: str | Path | dict, **overrides: Any) -> ModelConfig:
        """Read a Hugging Face ``config.json`` (Llama, Mistral, Qwen2; a path, a folder holding
        one, or the parsed dict), ``overrides`` set after import (``zoo.hf_config``).

        Raises:
            DesignError: another family, a feature the zoo does not model (naming the key), or
                an impossible design (``validate``, naming the field)."""
        from .hf_config import fields_from_hf

        fields, _ = fields_from_hf(path_or_dict, overrides.get("weight_dtype"))
        cfg = cls(**fields)
        return (cfg.replace(**overrides) if overrides else cfg).validate()

    def to_hf(self) -> dict[str, Any]:
        """This design as its family's Hugging Face ``config.json`` dict:
        ``zoo.hf_config.to_hf``.

        Raises:
            DesignError: a design with no HF equivalent (gelu FFN, layernorm).
        """
        from .hf_config import to_hf

        return to_hf(self)

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


# the fields that make a design: a results row's design columns and what tells two designs apart
# (``name``, ``family`` and ``extra`` are labels); every consumer reads this one tuple
DESIGN_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig)
                      if f.name not in ("name", "family", "extra"))


# the fields added after the first studies, with the default that leaves a design as it was
# (every field from ``qk_norm`` on: they follow it in the class)
_NAMES = [f.name for f in dataclasses.fields(ModelConfig)]
LATER_FIELDS = {f.name: f.default for f in dataclasses.fields(ModelConfig)
                if _NAMES.index(f.name) >= _NAMES.index("qk_norm")}


def presets() -> list[str]:
    """Names of the shipped model presets."""
    return ["tiny"] + sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def _choice(field_name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise DesignError(f"{field_name}={value!r} is not one of {', '.join(allowed)}")


# A CPU-sized Llama-style model: the default design space runs on it when no GPU is present.
TINY = ModelConfig(
    name="tiny", d_model=128, n_layers=2, n_heads=8, n_kv_heads=2, head_dim=16, ffn_dim=352,
    vocab_size=512, rope_theta=10000.0, max_seq_len=256, tie_embeddings=False, dtype="fp32",
    kv_dtype="fp32",
)
