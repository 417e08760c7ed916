"""The mixture-of-experts FFN on the torch path: router, top-k, SwiGLU experts, shared experts.

The layer ``zoo.moe`` describes (Mixtral, Qwen3-MoE, OLMoE; DeepSeekMoE's ungated shared
experts), computed as transformers computes it: a softmax over the router's logits in float32,
the top ``n_experts_active`` weights (renormalised with ``router_renorm``), each expert applied to
the tokens routed to it and its output added, weighted, into theirs. The experts' weights are
stacked: ``w13 [n_experts, 2 expert_ffn_dim, d_model]`` (gate then up, transformers'
``gate_up_proj``) and ``w2 [n_experts, d_model, expert_ffn_dim]`` (``down_proj``).

On the torch path (``kernels=torch``) the experts run one by one over their tokens, which reads
their token counts on the host: eager only (``sweep.plan.check_mode``). With ``kernels=triton``
the experts are two grouped GEMMs over the tokens sorted by expert on the device
(``kernels.moe_gemm``): no host sync, so a CUDA graph captures the step. A step of at most 8
tokens that the fused routing takes (``route_align``'s limits) runs the router's GEMM with the
routing and sort as one launch (``kernels.moe_route.router_route``) and sums each token's slots
inside the down GEMM's launch (``moe_down(sum_k=k)``); a step of more tokens within those limits
(a batch-64 decode step) runs the router's GEMM, then ``route_align``; both launch their grouped
GEMMs under programmatic dependent launch (``pdl``, set by ``Transformer.setup_cache``). A longer
step (a prefill) routes its rows in one launch (``kernels.moe_align.route_rows``) and sorts its
slots in two (the counting sort, inside ``moe_experts``). Under a routing skew the Triton
routing makes the draw itself, in the logits' place (the router's GEMM still runs); the torch
path, and routers of more than 256 experts, draw with torch's ops (``logits``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kernels import moe_align, moe_route
from kernels import moe_gemm as moe_kernels

from .config import ModelConfig
from .moe import MOE
from .nvtx import annotate


class SharedExperts(nn.Module):
    """``n_shared_experts`` SwiGLU experts every token goes through, as one FFN of width
    ``n_shared_experts * expert_ffn_dim``: ``w13 [2 S Fe, d]``, ``w2 [d, S Fe]``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        width = cfg.n_shared_experts * cfg.expert_ffn_dim
        self.w13 = nn.Linear(cfg.d_model, 2 * width, bias=False)
        self.w2 = nn.Linear(width, cfg.d_model, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """``h [N, d_model]`` -> ``[N, d_model]``."""
        gate, up = self.w13(h).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class MoEFeedForward(nn.Module):
    """A mixture-of-experts FFN (``zoo.moe.MoEFFN``).

    x: ``[B, T, d_model]`` -> ``[B, T, d_model]``. Parameters: ``router.weight [E, d]``,
    ``w13 [E, 2 Fe, d]``, ``w2 [E, d, Fe]``, and ``shared`` (``SharedExperts``) when
    ``n_shared_experts > 0``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg, self.kind = cfg, MOE
        E, d, Fe = cfg.n_experts, cfg.d_model, cfg.expert_ffn_dim
        self.router = nn.Linear(d, E, bias=False)
        self.w13 = nn.Parameter(torch.empty(E, 2 * Fe, d))
        self.w2 = nn.Parameter(torch.empty(E, d, Fe))
        self.shared = SharedExperts(cfg) if cfg.n_shared_experts else None
        self.log_prior: torch.Tensor | None = None  # a workload's routing skew (set_routing_skew)
        self.seed: torch.Tensor | None = None  # [1] int64: the Triton routing's draw counter
        self.record: list | None = None  # each forward's experts [N, k] kept here when a list
        self.pdl = False  # a decode step's kernels under PDL (Transformer.setup_cache)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The router's logits ``[N, E]`` of tokens ``h [N, d_model]``; under a routing skew
        (``set_routing_skew``) the GEMM still runs and the logits are a draw of
        ``log p_e + Gumbel`` (float32): their top ``k`` a Plackett-Luce sample of the Zipf prior
        (``zoo.routing``), made on the device (a CUDA graph replays a new draw)."""
        logits = self.router(h)
        if self.log_prior is None:
            return logits
        u = torch.rand(logits.shape, device=logits.device, dtype=torch.float32)
        return self.log_prior - torch.log(-torch.log(u.clamp_(1e-20, 1.0)))

    def draw(self) -> tuple | None:
        """``(log_prior [E] float32, seed [1] int64)`` for the Triton routing to draw in the
        logits' place under a routing skew (``set_routing_skew``), else None."""
        return None if self.log_prior is None else (self.log_prior, self.seed)

    def route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weights [N, k] in h's dtype, experts [N, k] int64)`` of tokens ``h [N, d_model]``:
        softmax over the router's logits in float32, the top ``k``, renormalised with
        ``router_renorm``."""
        with annotate("router"):
            logits = self.logits(h)
        with annotate("topk"):
            probs = torch.softmax(logits.float(), dim=-1)
            w, idx = torch.topk(probs, self.cfg.n_experts_active, dim=-1)
            if self.cfg.router_renorm:
                w = w / w.sum(dim=-1, keepdim=True)
        return w.to(h.dtype), idx

    def experts(self, h: torch.Tensor, w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """The routed experts' weighted sum ``[N, d_model]`` for tokens ``h [N, d_model]``,
        weights ``w [N, k]``, experts ``idx [N, k]``: tokens sorted by expert, each expert one
        SwiGLU over its own (the experts' token counts read on the host)."""
        k = idx.shape[1]
        out = torch.zeros_like(h)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.cfg.n_experts).tolist()
        wflat = w.reshape(-1)
        start = 0
        for e, c in enumerate(counts):
            if not c:
                continue
            slots = order[start:start + c]
            start += c
            tok = slots // k
            gate, up = F.linear(h[tok], self.w13[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.w2[e])
            out.index_add_(0, tok, y * wflat[slots, None])
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, T, d_model]`` -> ``[B, T, d_model]``."""
        B, T, d = x.shape
        h = x.reshape(B * T, d)
        cfg = self.cfg
        k = cfg.n_experts_active
        N = B * T
        if cfg.kernels == "triton" and moe_kernels.fused_route(N * k, cfg.n_experts):
            block = moe_kernels.tiles(N * k, cfg.n_experts)[0]
            draw = self.draw()
            if moe_route.fused_router(N, cfg.n_experts, k):
                with annotate("router"):  # the GEMM, softmax, top-k and the sort: one kernel
                    w, idx, *aligned = moe_route.router_route(h, self.router.weight, k,
                                                              cfg.router_renorm, block, draw=draw,
                                                              pdl=self.pdl)
            else:
                with annotate("router"):  # the GEMM, then softmax, top-k and the sort in one
                    logits = self.router(h)
                with annotate("topk"):
                    w, idx, *aligned = moe_kernels.route_align(logits, k, cfg.router_renorm,
                                                               block, h.dtype, draw=draw)
            with annotate("experts"):  # a decode step's few tokens: their slots summed inside
                out = moe_kernels.moe_experts(  # the down GEMM's launch
                    h, self.w13, self.w2, w, idx, aligned,
                    sum_in_down=moe_kernels.sum_in_down(N, cfg.n_experts, k), pdl=self.pdl)
        elif cfg.kernels == "triton" and cfg.n_experts <= moe_align.ROUTE_ROWS_MAX_EXPERTS:
            with annotate("router"):  # a long prompt: the GEMM, then the rows' top-k in one
                logits = self.router(h)  # launch, the slots' counting sort inside moe_experts
            with annotate("topk"):
                w, idx = moe_align.route_rows(logits, k, cfg.router_renorm, h.dtype,
                                              draw=self.draw())
            with annotate("experts"):
                out = moe_kernels.moe_experts(h, self.w13, self.w2, w, idx)
        else:
            w, idx = self.route(h)
            with annotate("experts"):
                if cfg.kernels == "triton":
                    out = moe_kernels.moe_experts(h, self.w13, self.w2, w, idx)
                else:
                    out = self.experts(h, w, idx)
        if self.record is not None:
            self.record.append(idx)
        if self.shared is not None:
            with annotate("shared"):
                out = out + self.shared(h)
        return out.view(B, T, d)

    def skinny(self, o: torch.Tensor, norm: nn.Module, residual: torch.Tensor):
        """The decode step's MoE FFN after attention (``zoo.model.Block.skinny``): the FFN norm
        with the residual add (one Triton kernel), then ``forward``. o, residual:
        ``[B, 1, d_model]``; returns ``(ffn_out, h)``, ``h = o + residual``."""
        f, h = norm.fused(o, residual=residual)
        return self.forward(f), h


def set_routing_skew(model: nn.Module, skew: float, draw: bool = False) -> int:
    """Route every MoE layer of ``model`` by the workload's ``routing_skew`` (``zoo.routing``:
    each token's experts drawn from the Zipf prior ``p_e ~ (e + 1)^-skew``); 0 restores the
    router as built, unless ``draw`` (``workload.routing=uniform``): then each token's experts
    are drawn uniformly (the prior of exponent 0). Each layer's Triton-routing draw counter
    starts from torch's generator (``torch.manual_seed`` repeats it) in a range of its own: the
    n-th MoE layer's at ``n 2^32`` plus 31 random bits, so no two layers draw with the same
    Philox key unless some 2^31 steps apart. Returns the number of MoE layers set.

    Raises:
        ValueError: ``skew < 0``.
    """
    from .routing import zipf_prior

    if skew < 0:
        raise ValueError(f"routing_skew must be >= 0, got {skew}")
    n = 0
    for m in model.modules():
        if isinstance(m, MoEFeedForward):
            p = torch.tensor(zipf_prior(m.cfg.n_experts, skew), dtype=torch.float32,
                             device=m.w13.device)
            m.log_prior = p.log() if skew > 0 or draw else None
            m.seed = None if m.log_prior is None else (torch.randint(
                0, 2**31 - 1, (1,), dtype=torch.int64) + (n << 32)).to(m.w13.device)
            n += 1
    return n
