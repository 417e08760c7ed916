"""FFN kinds, keyed by ``ModelConfig.ffn_type``: each says once what the rest of the project reads.

A kind declares, beside its ``nn.Module``: its parameters, matmul and elementwise FLOPs and the
activations it holds (``zoo.counts``), the kernels a stage launches (``kernels``: for the
performance model, ``sweep.analysis.predict.kernel_list``), its profiler ranges and their module
kinds (``sweep.measure.modules``), and its linear layers on the decode GEMV path with their
prologues (``sweep.measure.trial``). The registry follows torchtitan's model-spec pattern: a
kind is registered once (``register``), and every consumer asks ``kind(cfg)``.

Shipped: ``swiglu`` (Shazeer 2020, arXiv:2002.05202: ``w2(silu(x W1) * (x W3))``, gate and up
stacked in ``w13``), ``gelu`` (``w2(gelu(x W1))``) and ``geglu`` (Gemma's, GELU with the tanh
approximation on the gate), all ``DenseFFN``. Torch-free: the
package imports it, so ``zoo.config`` checks ``ffn_type`` against the registered names
(``config.FFN_TYPES``) before torch loads; a kind's module is imported when a model is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import FFN_TYPES, ModelConfig
from .kinds import Kinds, module_class
from .launches import Kernel, Stage

_KINDS = Kinds("ffn_type")


@dataclass(frozen=True)
class DenseFFN:
    """A dense FFN ``w2(act(x W13))``: ``n_in`` stacked input projections of ``ffn_dim`` rows
    each (``w13 [n_in * ffn_dim, d_model]``; a gated unit's gate and up), an activation, the down
    projection ``w2 [d_model, ffn_dim]``; no biases.

    Attributes:
        name: the ``ffn_type``.
        n_in: projections stacked in ``w13`` (2 gated, 1 not).
        act_flops: FLOP per hidden unit of the activation (and gate product), for
            ``zoo.counts``' elementwise estimate.
        act_op: the ``elementwise`` calibration entry that prices the activation's kernel (its
            bytes: ``3 M ffn_dim`` elements).
        w2_prologue: the decode GEMV prologue that applies the activation while ``w2`` reads its
            input (``kernels.gemv``: ``swiglu``), or None: the activation runs a kernel of its own.
        act_launches: kernels the activation launches (None: ``act_op``'s count in
            ``zoo.launches``; GELU: one ATen kernel).
        module: ``"package.module:Class"`` of its ``nn.Module`` (``build``), which has ``w13``
            and ``w2`` and a ``skinny`` decode step.
        ranges: its profiler ranges (``zoo.nvtx.annotate``) and the module kind each times.
    """

    name: str
    n_in: int
    act_flops: int = 5
    act_op: str = "swiglu"
    w2_prologue: str | None = None
    act_launches: int | None = None
    module: str = "zoo.model:FeedForward"
    ranges: tuple = (("w13", "ffn"), ("act", "norms_elementwise"), ("w2", "ffn"))

    def params(self, cfg: ModelConfig) -> int:
        """Parameters per layer: ``(n_in + 1) d_model ffn_dim``."""
        return (self.n_in + 1) * cfg.d_model * cfg.ffn_dim

    def active_params(self, cfg: ModelConfig) -> int:
        """Parameters a token uses per layer: all of them (``params``)."""
        return self.params(cfg)

    def read_params(self, cfg: ModelConfig, tokens: int, skew: float = 0.0) -> int:
        """Parameters a forward reads per layer: all of them (``params``; ``skew``, the
        routing's, is an MoE layer's)."""
        return self.params(cfg)

    def flops(self, cfg: ModelConfig, tokens: int) -> int:
        """Matmul FLOP per layer for ``tokens`` rows: ``2 tokens d_model ffn_dim (n_in + 1)``."""
        return 2 * tokens * cfg.d_model * cfg.ffn_dim * (self.n_in + 1)

    def elementwise_flops(self, cfg: ModelConfig, tokens: int) -> int:
        """The activation's FLOP per layer (estimate): ``act_flops`` per hidden unit."""
        return self.act_flops * tokens * cfg.ffn_dim

    def hidden_per_token(self, cfg: ModelConfig) -> int:
        """Elements a prefill holds per token: ``w13``'s output and the activation's."""
        return (self.n_in + 1) * cfg.ffn_dim

    def kernels(self, st: Stage, rep: int | None = None) -> list[Kernel]:
        """The FFN's kernels in stage ``st`` after its norm, over ``rep`` layers (default: every
        layer): ``w13`` (the norm and residual add in its prologue on the GEMV path), the
        activation (in ``w2``'s prologue there, if it has one), ``w2``."""
        F, d = st.cfg.ffn_dim, st.cfg.d_model
        out = [st.gemm("ffn", "w13", self.n_in * F, d, rep=rep, prologue="norm+res"),
               st.elem(self.act_op, 3 * st.M * F * st.wb, rep=rep, launches=self.act_launches,
                       in_prologue=self.w2_prologue is not None),
               st.gemm("ffn", "w2", d, F, rep=rep, prologue=self.w2_prologue or "none")]
        return [k for k in out if k is not None]

    def decode_linears(self, ffn) -> list[tuple]:
        """``(range, nn.Linear, prologue)`` of the module ``ffn``'s layers on the decode GEMV
        path (``kernels.decode_linear.chosen`` reads which of the GEMV and cuBLAS ran)."""
        return [("w13", ffn.w13, "norm"), ("w2", ffn.w2, self.w2_prologue or "none")]

    def build(self, cfg: ModelConfig):
        """The FFN's ``nn.Module`` for ``cfg`` (its class imported now)."""
        return module_class(self.module)(cfg)


def register(k) -> None:
    """Register FFN kind ``k`` under ``k.name`` (a design's ``ffn_type``).

    Raises:
        ValueError: another kind of that name is registered already.
    """
    _KINDS.register(k)
    if k.name not in FFN_TYPES:
        FFN_TYPES.append(k.name)  # what zoo.config checks a design's ffn_type against


def names() -> tuple[str, ...]:
    """The registered ``ffn_type`` names."""
    return _KINDS.names()


def kind(cfg: ModelConfig, layer: int | None = None):
    """The FFN kind of design ``cfg`` at block ``layer`` (default: its last block, an MoE
    design's MoE layer): the mixture of experts (``zoo.moe``) where ``cfg.layer_is_moe``, else
    the dense kind of ``cfg.ffn_type``.

    Raises:
        KeyError: ``cfg.ffn_type`` is not registered.
    """
    if cfg.layer_is_moe(cfg.n_layers - 1 if layer is None else layer):
        from .moe import MOE

        return MOE
    return dense_kind(cfg)


def dense_kind(cfg: ModelConfig):
    """The dense FFN kind of ``cfg.ffn_type`` (an MoE design's dense blocks, and its experts'
    activation).

    Raises:
        KeyError: ``cfg.ffn_type`` is not registered.
    """
    return _KINDS.get(cfg.ffn_type)


def groups(cfg: ModelConfig) -> list[tuple]:
    """``[(kind, layers)]``: the design's FFN kinds and how many blocks hold each, in block
    order (a dense design: one group; an MoE design: its ``first_k_dense`` dense blocks, then
    the MoE ones)."""
    out: list[tuple] = []
    for i in range(cfg.n_layers):
        k = kind(cfg, i)
        if out and out[-1][0] is k:
            out[-1] = (k, out[-1][1] + 1)
        else:
            out.append((k, 1))
    return out


def ranges() -> dict[str, str]:
    """Every registered kind's profiler ranges -> module kind (the MoE kind's too)."""
    from .moe import MOE

    return {**_KINDS.ranges(), **dict(MOE.ranges)}


register(DenseFFN("swiglu", 2, w2_prologue="swiglu"))
register(DenseFFN("gelu", 1, act_launches=1))
# Gemma's GeGLU (``w2(gelu_tanh(x W1) * (x W3))``): torch ops (two launches, as SwiGLU's), priced from the
# SwiGLU entry of its bytes (like ops: a gate product after a pointwise activation)
register(DenseFFN("geglu", 2, act_flops=9))
