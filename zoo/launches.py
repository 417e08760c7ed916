"""The kernels a stage launches, as the zoo's components declare them for the performance model.

A ``Kernel`` is one kernel (or fused op) of a forward: its module kind (``zoo.counts.MODULES``),
the calibration entry that prices it (``kind``: ``gemm``, ``gemv``, ``elementwise``,
``decode_attn``, ``prefill_attn``), its shape, matmul FLOPs (FLOP), minimum bytes (bytes) and
launches. ``Stage`` holds what a component needs to list its kernels for one forward (the design,
the rows, which path runs: torch or Triton, the decode GEMV path) and builds them: ``gemm`` for a
linear layer, ``elem`` for an elementwise op. ``sweep.analysis.predict.kernel_list`` walks the
design's components with one. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import ModelConfig
from .formats import DTYPE_BYTES

# kernels each op launches (ATen ops of the torch path, one fused kernel of the Triton path);
# counted from zoo/model.py and zoo/attention.py, for the launch cost, and held to what the eager
# model launches by tests/test_launches.py (RMSNorm: two casts, pow, mean, add, rsqrt, two
# multiplies; the torch decode attention: two matmuls, two casts, the scale, the mask's negation,
# masked_fill, softmax)
TORCH_KERNELS = {"rmsnorm": 8, "rope": 14, "kv_write": 2, "residual": 1, "swiglu": 2,
                 "decode_attn": 8, "prefill_attn": 1, "gemm": 1, "embedding": 1}
# Triton: RoPE and the K/V cache write are one kernel (``rope_kv_write_``), decode attention one or
# two (``kernels.decode_attention.launches``); on the decode GEMV path (``Block.skinny``: a step of
# <= 16 sequences, RMSNorm) the norms and SwiGLU run in the GEMVs' prologues, no launch of their own
TRITON_KERNELS = {"rmsnorm": 1, "rope": 1, "kv_write": 0, "swiglu": 1, "decode_attn": 1,
                  "prefill_attn": 1, "gemm": 1, "embedding": 1}
GEMV_MAX_M = 16  # the most rows of the decode GEMV path (kernels.gemv.MAX_M; tests hold them equal)
# one norm's torch launches by ``ModelConfig.norm``: LayerNorm one ATen kernel; Gemma's 1 + w
# RMSNorm two more than RMSNorm (the weight's cast and the 1 + w add)
NORM_LAUNCHES = {"rmsnorm": TORCH_KERNELS["rmsnorm"], "layernorm": 1,
                 "rmsnorm1p": TORCH_KERNELS["rmsnorm"] + 2}


@dataclass
class Kernel:
    """One kernel (or fused op) of a stage: ``module`` kind, ``kind`` of calibration entry,
    its shape, matmul FLOPs and minimum bytes, and how many launches it takes."""

    module: str
    kind: str
    op: str
    flops: float
    bytes: float
    shape: dict = field(default_factory=dict)
    launches: int = 1
    repeat: int = 1  # identical kernels in the stage (one per layer)


@dataclass
class Stage:
    """One forward of ``new`` tokens per sequence over ``context`` positions (prefill: ``new ==
    context``; a decode step: ``new == 1``) of ``cfg`` at ``batch``, on ``kernels`` (``torch`` or
    ``triton``). ``skinny``: a Triton decode step of at most ``GEMV_MAX_M`` sequences with RMSNorm
    blocks, whose linear layers run as ``gemv`` kernels with the norm or activation in their
    prologue (``zoo.model.Block.skinny``)."""

    cfg: ModelConfig
    batch: int
    new: int
    context: int
    kernels: str
    skew: float = 0.0  # the workload's routing_skew (an MoE layer's touched experts: zoo.routing)
    draw: bool = False  # workload.routing=uniform: each token's experts drawn at routing_skew 0
    # the distinct experts an MoE layer's tokens reached in this stage, as a trial measured them
    # (its moe_{stage}_experts_touched, a layer's mean); NaN: those expected under the routing
    touched: float = float("nan")

    @property
    def draws(self) -> bool:
        """Whether an MoE layer's experts are drawn from a prior (a skew, or ``uniform``), not
        chosen by the router's logits: on the Triton path drawn inside the routing's launch (up
        to 256 experts), else by torch's ops after the router's GEMM."""
        return self.skew > 0 or self.draw

    @property
    def M(self) -> int:
        """Rows of the stage's linear layers: ``batch * new``."""
        return self.batch * self.new

    @property
    def fused(self) -> bool:
        """Whether the Triton kernels run (``kernels == 'triton'``)."""
        return self.kernels == "triton"

    @property
    def impl(self) -> str:
        """``triton`` or ``torch``: the implementation an elementwise entry is priced for."""
        return "triton" if self.fused else "torch"

    @property
    def skinny(self) -> bool:
        """Whether the linear layers run on the decode GEMV path (see the class doc)."""
        return (self.fused and self.new == 1 and self.batch <= GEMV_MAX_M
                and self.cfg.norm == "rmsnorm")

    @property
    def wb(self) -> int:
        """Bytes per activation element (the model dtype's)."""
        return DTYPE_BYTES[self.cfg.dtype]

    def launches(self, op: str) -> int:
        """Kernels the op ``op`` launches on this stage's path (``TORCH_KERNELS`` /
        ``TRITON_KERNELS``)."""
        return (TRITON_KERNELS if self.fused else TORCH_KERNELS)[op]

    def gemm(self, module: str, op: str, N: int, K: int, m: int | None = None,
             rep: int | None = None, prologue: str = "none") -> Kernel:
        """A linear layer ``[m, K] @ [K, N]`` (``m``: default ``M``) repeated ``rep`` times
        (default: once per layer): ``2 m N K`` FLOP, the weight at ``cfg.weight_bits`` plus the
        activations in and out (bytes). On the decode GEMV path a ``gemv`` entry with its
        ``prologue`` (``none``, ``norm``, ``norm+res``, ``swiglu``, maybe ``+bias``), else a
        ``gemm`` entry."""
        cfg = self.cfg
        m = self.M if m is None else m
        rep = cfg.n_layers if rep is None else rep
        shape = {"M": m, "N": N, "K": K, "dtype": cfg.dtype}
        wbits = cfg.weight_bits  # a quantized weight format (predicted only) reads fewer bytes
        if wbits != 8 * self.wb:
            shape["weight_bits"] = wbits
        nbytes = N * K * wbits / 8 + (m * K + m * N) * self.wb
        if self.skinny:  # the decode GEMV (or cuBLAS after its prologue), as the model runs it
            return Kernel(module, "gemv", op, 2 * m * N * K, nbytes,
                          dict(shape, prologue=prologue), 1, rep)
        return Kernel(module, "gemm", op, 2 * m * N * K, nbytes, shape, 1, rep)

    def elem(self, op: str, nbytes: float, rep: int | None = None, launches: int | None = None,
             in_prologue: bool = False, like: str | None = None,
             impl: str | None = None) -> Kernel | None:
        """An elementwise op ``op`` moving ``nbytes`` (priced by its ``elementwise`` entry, or
        ``like``'s: another op's entry), repeated ``rep`` times (default: once per layer), run by
        ``impl`` (default the stage's path: torch ops on the Triton path say so); None where it
        runs in a GEMV's prologue on the decode GEMV path (``in_prologue``)."""
        if self.skinny and in_prologue:
            return None
        return Kernel("norms_elementwise", "elementwise", op, 0, nbytes,
                      {"op": like or op, "impl": impl or self.impl, "bytes": nbytes},
                      self.launches(op) if launches is None else launches,
                      self.cfg.n_layers if rep is None else rep)
