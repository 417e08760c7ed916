"""The mixture-of-experts FFN kind: what the rest of the project reads of an MoE layer.

An MoE layer (``ModelConfig.n_experts > 0``, from block ``first_k_dense`` on) replaces the dense
FFN with a router ``[n_experts, d_model]``, a softmax over the experts and a top-k choice of
``n_experts_active`` (k) of them per token (the k weights renormalised with ``router_renorm``),
``n_experts`` SwiGLU experts of width ``expert_ffn_dim`` (``Fe``), and ``n_shared_experts`` (S)
experts every token goes through (one SwiGLU of width ``S Fe``). The layout of Mixtral
(Jiang et al. 2024, arXiv:2401.04088), Qwen3-MoE and OLMoE (Muennighoff et al. 2024,
arXiv:2409.02060); shared experts as DeepSeekMoE's (Dai et al. 2024, arXiv:2401.06066).

Like ``zoo.ffn.DenseFFN`` it declares its parameters (total and active), FLOPs, the activations
it holds, the weights a stage reads (``read_params``: the experts its tokens touch), the kernels a
stage launches and its profiler ranges. Torch-free; its module is ``zoo.experts.MoEFeedForward``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ModelConfig
from .kinds import module_class
from .launches import Kernel, Stage
from .routing import expected_touched  # the experts a step touches (uniform or skewed routing)

# the slots' device-side sort by expert past the fused routing's limits: a counting sort of two
# launches (``kernels.moe_align.align``: the count, then the places; before 2026-11-28's
# fifteenth session, 25 small torch ops); a step of at most ROUTE_ALIGN_MAX_SLOTS slots over at
# most ROUTE_ALIGN_MAX_EXPERTS experts routes and sorts in one launch instead
# (``kernels.moe_gemm.route_align``; the zoo is torch-free: a test holds them equal)
ALIGN_LAUNCHES = 2
# a routing skew's draw after the router's GEMM (zoo.experts.MoEFeedForward.logits) on the
# torch path and past ROUTE_ROWS_MAX_EXPERTS (the Triton routing draws inside its launch): rand,
# the clamp, a log, its negation, a log and the prior's subtraction
SKEW_LAUNCHES = 6
ROUTE_ALIGN_MAX_SLOTS = 512
ROUTE_ALIGN_MAX_EXPERTS = 256
ROUTE_ALIGN_MAX_CELLS = 32768
# a longer step's rows route in one launch for at most this many experts
# (``kernels.moe_align.route_rows``; its mirror, held equal by a test), else with torch's ops
ROUTE_ROWS_MAX_EXPERTS = 256
# a decode step of at most this many tokens runs the router's GEMM with the routing and sort as
# one launch (``kernels.moe_route.router_route``; a routing skew drawn inside it) and sums each
# token's slots inside the down GEMM's launch (``kernels.moe_gemm.moe_down(sum_k=k)``): mirrors of
# ``kernels.moe_route.ROUTER_ROUTE_MAX_TOKENS`` and ``kernels.moe_gemm.SUM_IN_DOWN_MAX_TOKENS``
ROUTER_ROUTE_MAX_TOKENS = 8
SUM_IN_DOWN_MAX_TOKENS = 8


def block_rows(slots: int, n_experts: int) -> int:
    """The grouped GEMMs' ``BLOCK_M`` for ``slots`` routed (token, expert) pairs over
    ``n_experts`` (mirror of ``kernels.moe_gemm.tiles``' first figure): each expert's rows are
    padded to whole blocks of it (``zoo.routing.expected_blocks``; ``sweep.measure.moe_routing``
    counts a trial's)."""
    if slots <= 1024:
        return 16
    return 64 if slots / max(1, n_experts) < 128 else 128


def stage_touched(st: Stage) -> float:
    """The distinct experts an MoE layer of stage ``st`` reads: those a trial measured
    (``st.touched``) where given, else the expectation under the workload's routing
    (``expected_touched``: uniform, or ``routing_skew``'s Zipf prior)."""
    cfg = st.cfg
    if st.touched > 0:  # NaN (not measured) is not
        return min(float(st.touched), cfg.n_experts)
    return expected_touched(cfg.n_experts, cfg.n_experts_active, st.M, st.skew)


def _pow2(n: int) -> int:
    """The power of two at or above ``n``, at least 16 (``triton.next_power_of_2``, floored)."""
    return max(16, 1 << (n - 1).bit_length())


def route_bytes(tokens: int, n_experts: int, k: int, d_model: int, wb: int) -> int:
    """Bytes the routing after the router's GEMM moves for ``tokens`` tokens: the fp32 logits
    ``[tokens, n_experts]`` read and their softmax written, the top-k weights and ids
    ``[tokens, k]`` (fp32 / int32) written and read, and the hidden ``[tokens, d_model]`` (``wb``
    bytes an element) cast. The kernel list and ``sweep.measure.microbench`` both count it."""
    return (2 * tokens * n_experts + 2 * tokens * k) * 4 + tokens * d_model * wb


def align_block(slots: int, n_experts: int) -> int:
    """The grouped GEMMs' ``BLOCK_M`` for ``slots`` slots over ``n_experts``: the block each
    expert's run is padded to (a mirror of ``kernels.moe_gemm.tiles``, held equal by a test)."""
    if slots <= 1024:
        return 16
    return 64 if slots / max(1, n_experts) < 128 else 128


def align_bytes(slots: int, n_experts: int) -> int:
    """Bytes of the counting sort (``moe_align``) of ``slots`` slots: the expert ids (int64)
    read twice, the sorted ids (int32) marked as padding over ``cdiv(slots, block_m) +
    min(n_experts, slots)`` blocks of ``block_m = align_block(slots, n_experts)`` positions, then
    each slot's written."""
    block_m = align_block(slots, n_experts)
    blocks = -(-slots // block_m) + min(n_experts, slots)
    return 20 * slots + 4 * blocks * block_m


def sum_bytes(tokens: int, k: int, d_model: int, wb: int) -> int:
    """Bytes of the slots' sum (``moe_sum``): ``[tokens k, d_model]`` read, ``[tokens, d_model]``
    written, ``wb`` bytes an element."""
    return (tokens * k + tokens) * d_model * wb


def fused_route(slots: int, n_experts: int) -> bool:
    """``kernels.moe_gemm.fused_route``: whether a step routes and sorts in one launch."""
    return (slots <= ROUTE_ALIGN_MAX_SLOTS and n_experts <= ROUTE_ALIGN_MAX_EXPERTS
            and _pow2(slots) * _pow2(n_experts) <= ROUTE_ALIGN_MAX_CELLS)


def sum_in_down(tokens: int, n_experts: int, k: int) -> bool:
    """``kernels.moe_gemm.sum_in_down``: whether a step's slots are summed in ``moe_down``."""
    return tokens <= SUM_IN_DOWN_MAX_TOKENS and fused_route(tokens * k, n_experts)


def fused_router(tokens: int, n_experts: int, k: int) -> bool:
    """``kernels.moe_route.fused_router``: whether a step of ``tokens`` tokens runs the router's
    GEMM, routing and sort as one launch (``router_route``)."""
    return tokens <= ROUTER_ROUTE_MAX_TOKENS and fused_route(tokens * k, n_experts)


@dataclass(frozen=True)
class MoEFFN:
    """The MoE FFN kind (see the module doc).

    Attributes:
        name: the kind's name (``moe``; not an ``ffn_type``: the experts are SwiGLU).
        module: ``"package.module:Class"`` of its ``nn.Module``.
        ranges: its profiler ranges and the module kind each times (the router's GEMM and the
            experts' GEMMs are the ``ffn`` module's, the softmax / top-k and the combine its
            elementwise part).
    """

    name: str = "moe"
    module: str = "zoo.experts:MoEFeedForward"
    ranges: tuple = (("router", "ffn"), ("topk", "norms_elementwise"),
                     ("experts", "ffn"), ("shared", "ffn"))

    @staticmethod
    def expert_params(cfg: ModelConfig) -> int:
        """Parameters of one expert: ``3 d_model expert_ffn_dim`` (gate, up, down); also what one
        touched expert more or fewer adds to a forward's read (``zoo.counts.expert_bytes``)."""
        return 3 * cfg.d_model * cfg.expert_ffn_dim

    def _with(self, cfg: ModelConfig, routed: float) -> float:
        """The router ``E d``, ``routed`` routed experts and the ``S`` shared ones."""
        return cfg.n_experts * cfg.d_model + (routed + cfg.n_shared_experts) * self.expert_params(cfg)

    def params(self, cfg: ModelConfig) -> int:
        """Parameters per MoE layer: the router ``E d`` and ``E + S`` experts."""
        return self._with(cfg, cfg.n_experts)

    def active_params(self, cfg: ModelConfig) -> int:
        """Parameters one token uses per MoE layer: the router and ``k + S`` experts."""
        return self._with(cfg, cfg.n_experts_active)

    def read_params(self, cfg: ModelConfig, tokens: int, skew: float = 0.0) -> float:
        """Parameters a forward of ``tokens`` tokens reads per MoE layer (the minimum: each
        touched expert once): the router, the expected touched experts under ``routing_skew``
        ``skew`` (``expected_touched``) and the shared ones."""
        return self._with(cfg, expected_touched(cfg.n_experts, cfg.n_experts_active, tokens,
                                                skew))

    def flops(self, cfg: ModelConfig, tokens: int) -> int:
        """Matmul FLOP per MoE layer for ``tokens`` rows: the router ``2 N d E`` and ``k + S``
        experts per token, ``2 N (k + S) 3 d Fe``."""
        return 2 * tokens * cfg.d_model * cfg.n_experts + \
            2 * tokens * (cfg.n_experts_active + cfg.n_shared_experts) * self.expert_params(cfg)

    def elementwise_flops(self, cfg: ModelConfig, tokens: int) -> int:
        """Per MoE layer (estimate): the router's softmax ~5 FLOP per expert, SwiGLU ~5 per
        hidden unit of each expert a token goes through, the weighted combine 2 per channel and
        routed expert."""
        k, S = cfg.n_experts_active, cfg.n_shared_experts
        return tokens * (5 * cfg.n_experts + 5 * (k + S) * cfg.expert_ffn_dim
                         + 2 * k * cfg.d_model)

    def hidden_per_token(self, cfg: ModelConfig) -> int:
        """Elements a prefill holds per token (the Triton path's buffers): router logits, the
        activation of each of its ``k`` slots (``Fe``) and their outputs (``d``), the shared
        experts' gate, up and activation (``3 S Fe``)."""
        k, S = cfg.n_experts_active, cfg.n_shared_experts
        return cfg.n_experts + k * (cfg.expert_ffn_dim + cfg.d_model) + 3 * S * cfg.expert_ffn_dim

    def kernels(self, st: Stage, rep: int) -> list[Kernel]:
        """The MoE FFN's kernels in stage ``st`` over ``rep`` MoE layers, as the torch path
        (``zoo.experts``) launches them: the router GEMM; its softmax and top-k with the tokens'
        sort by expert (``router``: float32 casts, softmax, top-k, the renormalisation, the
        output zeroed, the sort and the count); then per touched expert (their number measured
        by the trial, else expected: ``stage_touched``) its tokens and weights gathered
        (``moe_gather``), the ``w13`` GEMM over them, SwiGLU, ``w2``, and its output weighted
        and added into theirs (``moe_combine``); the shared experts as one dense FFN added in.
        Ops without a calibration entry of their own are priced by a like one, noted
        (``sweep.analysis.proxies.PROXIES``)."""
        cfg, M, wb = st.cfg, st.M, st.wb
        d, E, k, Fe, S = (cfg.d_model, cfg.n_experts, cfg.n_experts_active, cfg.expert_ffn_dim,
                          cfg.n_shared_experts)
        touched = stage_touched(st)
        n_exp = max(1, round(touched))
        m = max(1, round(M * k / touched))  # tokens per touched expert, on average
        # the router's logits to float32 (not a drawn routing's: float32 already) and back
        casts = 0 if cfg.dtype == "fp32" else 2 - st.draws
        if st.fused:
            return self._fused_kernels(st, rep, n_exp, m, casts, touched)
        out = [st.gemm("ffn", "router", E, d, rep=rep),
               st.elem("router", 4 * M * E * 4, rep=rep, launches=SKEW_LAUNCHES)
               if st.draws else None,
               st.elem("router", (2 * M * E + 2 * M * k) * 4 + M * d * wb, rep=rep,
                       launches=casts + 2 + 2 * cfg.router_renorm + 3),
               st.elem("moe_gather", 2 * m * d * wb, rep=rep * n_exp, launches=3),
               st.gemm("ffn", "experts_w13", 2 * Fe, d, m=m, rep=rep * n_exp),
               st.elem("swiglu", 3 * m * Fe * wb, rep=rep * n_exp),
               st.gemm("ffn", "experts_w2", d, Fe, m=m, rep=rep * n_exp),
               st.elem("moe_combine", 3 * m * d * wb, rep=rep * n_exp, launches=2)]
        if S:
            out += [st.gemm("ffn", "shared_w13", 2 * S * Fe, d, rep=rep),
                    st.elem("swiglu", 3 * M * S * Fe * wb, rep=rep),
                    st.gemm("ffn", "shared_w2", d, S * Fe, rep=rep),
                    st.elem("residual", 3 * M * d * wb, rep=rep)]
        return [x for x in out if x is not None]

    def _fused_kernels(self, st: Stage, rep: int, n_exp: int, m: int, casts: int, touched: float
                       ) -> list[Kernel]:
        """``kernels`` on the Triton path (``kernels.moe_gemm``): on the decode GEMV path the FFN
        norm with the residual add (a kernel of its own: no GEMV prologue takes it); the
        router's GEMM (cuBLAS); its softmax, top-k and sort by expert in one kernel
        (``route_align``, its own ``elementwise`` entry; under a routing draw after a launch
        that draws a program a token, ``route_draw``) where it takes the step, else the
        rows' softmax and top-k in one launch (``route_rows``; torch's ops past
        ``ROUTE_ROWS_MAX_EXPERTS``) and the slots' counting sort (``moe_align``, two launches;
        both ``kernels.moe_align``); for a step of at most ``ROUTER_ROUTE_MAX_TOKENS``
        tokens, the GEMM and ``route_align`` as one launch instead
        (``router_route``, a ``moe_gemm`` entry of its own, else priced as the two launches it
        replaces, noted); the two grouped GEMMs, each one launch reading every touched expert's
        weights once (priced by their own ``moe_gemm`` calibration entries, else as ``n_exp``
        GEMMs of ``m`` tokens, noted); the slots' sum (``moe_sum``: torch's reduction over the
        ``k`` slots), inside ``moe_down``'s launch for at most ``SUM_IN_DOWN_MAX_TOKENS`` tokens
        that ``route_align`` takes; the shared experts as torch's dense FFN. ``route_align`` and
        ``moe_sum`` without entries of their own (calibrations before 2026-11-27's sixth
        session): priced as before, as a graph launch and as the ``residual`` add
        (``sweep.analysis.proxies``), noted."""
        cfg, M, wb = st.cfg, st.M, st.wb
        d, E, k, Fe, S = (cfg.d_model, cfg.n_experts, cfg.n_experts_active, cfg.expert_ffn_dim,
                          cfg.n_shared_experts)

        def gemm(op, N, K, rows, experts=None):
            shape = {"M": rows, "N": N, "K": K, "dtype": cfg.dtype}
            n, slots = experts or 1, rows * (experts or 1)
            if experts:  # a grouped GEMM: its own calibration entry is keyed by the step's
                # tokens, experts and top-k (``sweep.analysis.needs``: ``moe_gemm``)
                shape.update(experts=experts, tokens=M, E=E, topk=k)
            if experts and op != "router_route":  # the expected (or measured) experts and the
                n, slots = touched, M * k  # slots, unrounded: a tenth of an expert's bytes
                shape["touched"] = touched  # counts (a batch-4 step's 10.4 or 10.9 of 16)
            wbits = cfg.weight_bits  # a quantized weight format (predicted only) reads fewer
            if wbits != 8 * wb:
                shape["weight_bits"] = wbits
            return Kernel("ffn", "gemm", op, 2 * slots * N * K,
                          n * N * K * wbits / 8 + slots * (N + K) * wb, shape, 1, rep)

        def op(name, nbytes, launches=1, impl="torch"):  # the small ops around the GEMMs
            return st.elem(name, nbytes, rep=rep, launches=launches, impl=impl)

        routed = route_bytes(M, E, k, d, wb)
        summed = sum_in_down(M, E, k)  # the slots' sum inside moe_down's launch
        if fused_router(M, E, k):  # kernels.moe_route.router_route: the GEMM over E programs,
            route = [gemm("router_route", E, d, M, 1)]  # the last routing (a skew drawn in it)
        elif fused_route(M * k, E):  # kernels.moe_gemm.route_align: one program, latency-bound
            route = [gemm("router", E, d, M),  # under a draw, drawn first a program a token
                     op("route_draw", 4 * M * E, impl="triton") if st.draws else None,
                     op("route_align", routed, impl="triton")]
        else:  # a long prompt: the GEMM, the rows' top-k (kernels.moe_align.route_rows; past
            # its experts torch's ops, a skew drawn by torch after the GEMM), the counting sort
            rows = E <= ROUTE_ROWS_MAX_EXPERTS
            route = [gemm("router", E, d, M),
                     op("route_rows", routed, impl="triton") if rows else
                     op("router", routed, casts + 2 + 2 * cfg.router_renorm),
                     op("router", 4 * M * E * 4, SKEW_LAUNCHES) if st.draws and not rows else None,
                     op("moe_align", align_bytes(M * k, E), ALIGN_LAUNCHES, "triton")]
        out = [st.elem("rmsnorm", 4 * M * d * wb, rep=rep) if st.skinny else None, *route,
               gemm("moe_up", 2 * Fe, d, m, n_exp),
               gemm("moe_down", d, Fe, m, n_exp),
               None if summed else op("moe_sum", sum_bytes(M, k, d, wb))]  # the slots' sum
        if S:
            out += [gemm("shared_w13", 2 * S * Fe, d, M),
                    op("swiglu", 3 * M * S * Fe * wb, 2),
                    gemm("shared_w2", d, S * Fe, M),
                    op("residual", 3 * M * d * wb)]
        return [x for x in out if x is not None]

    def decode_linears(self, ffn) -> list[tuple]:
        """None: no MoE layer runs on the decode GEMV path (``kernels.decode_linear``)."""
        return []

    def build(self, cfg: ModelConfig):
        """The MoE FFN's ``nn.Module`` for ``cfg`` (its class imported now)."""
        return module_class(self.module)(cfg)


MOE = MoEFFN()
