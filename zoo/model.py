"""The parametric decoder-only transformer, top to bottom (nanoGPT / gpt-fast layout).

Data flow: token embedding -> ``n_layers`` x Block(norm -> Attention (RoPE, GQA, static KV cache)
-> residual; norm -> FeedForward -> residual) -> final norm -> LM head.

Weights use fused projections: ``wqkv`` holds q, k and v stacked on the output dimension
(``[q_dim + 2 * kv_dim, d_model]``) and, for SwiGLU, ``w13`` holds gate and up
(``[2 * ffn_dim, d_model]``), so each is one GEMM. ``zoo.weights`` maps Hugging Face names onto these.

The model computes; prefill/decode loops, CUDA graphs and timing live in ``zoo.generate`` and
``sweep``. Everything here is shape-static given ``(batch, T)``, so a decode step can be captured in a
CUDA graph.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from kernels import decode_attention, gemv, ops

from . import attn, ffn
from .cache import TORCH_DTYPES, KVCache
from .config import ModelConfig
from .layer_types import declared_local
from .norms import make_norm
from .nvtx import annotate
from .rope_tables import rope_cache


class FeedForward(nn.Module):
    """A dense FFN of ``zoo.ffn.DenseFFN`` kind: SwiGLU (Shazeer 2020, arXiv:2002.05202:
    ``w2(silu(x W1) * (x W3))``, gate and up stacked in ``w13``) or GELU (``w2(gelu(x W1))``).

    x: ``[B, T, d_model]`` -> ``[B, T, d_model]``; hidden width ``ffn_dim``. A kind of another
    activation subclasses it and overrides ``act`` (and ``skinny`` if its ``w2`` has no GEMV
    prologue for it).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.kind = ffn.dense_kind(cfg)
        self.w13 = nn.Linear(cfg.d_model, self.kind.n_in * cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False)

    def act(self, h: torch.Tensor) -> torch.Tensor:
        """The activation of ``w13``'s output ``[..., n_in * ffn_dim]`` -> ``[..., ffn_dim]``."""
        if self.cfg.ffn_type == "swiglu" and self.cfg.kernels == "triton":
            return ops.swiglu(h)
        if self.cfg.ffn_type == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            return F.silu(gate) * up
        if self.cfg.ffn_type == "geglu":  # Gemma's: GELU (tanh approximation) of the gate
            gate, up = h.chunk(2, dim=-1)
            return F.gelu(gate, approximate="tanh") * up
        return F.gelu(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, T, d_model]`` -> ``[B, T, d_model]`` through a ``[B, T, ffn_dim]`` hidden."""
        with annotate("w13"):
            h = self.w13(x)
        with annotate("act"):
            h = self.act(h)
        with annotate("w2"):
            return self.w2(h)

    def skinny(self, o: torch.Tensor, norm: nn.Module, residual: torch.Tensor):
        """The decode step's FFN on the GEMV path (``Block.skinny``): ``w13`` with ``norm`` and
        the residual add in its prologue, then ``w2`` with the activation in its prologue where
        the kind has one (``DenseFFN.w2_prologue``), else after the activation's own kernel.
        o, residual: ``[B, 1, d_model]``; returns ``(ffn_out, h)``, ``h = o + residual``."""
        with annotate("w13"):
            g, h = ops.linear(o, self.w13, "norm", norm, residual)
        with annotate("w2"):
            if self.kind.w2_prologue:
                return ops.linear(g, self.w2, self.kind.w2_prologue), h
            return ops.linear(self.act(g), self.w2), h


class Block(nn.Module):
    """Pre-norm transformer block: ``h = x + attn(norm(x)); out = h + ffn(norm(h))``; with
    ``sandwich_norm`` (Gemma 2 / 3) the attention's and the FFN's outputs are normed too before
    their residual adds: ``h = x + norm(attn(norm(x)))``, ``out = h + norm(ffn(norm(h)))``."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.fused_norm = cfg.kernels == "triton" and cfg.norm == "rmsnorm"
        self.attention_norm = make_norm(cfg)
        self.attention = attn.kind(cfg).build(cfg, layer)
        self.ffn_norm = make_norm(cfg)
        self.feed_forward = ffn.kind(cfg, layer).build(cfg)
        if cfg.sandwich_norm:  # torch path only (zoo.torch_only)
            self.post_attention_norm = make_norm(cfg)
            self.post_ffn_norm = make_norm(cfg)
        self.sandwich = cfg.sandwich_norm

    def forward(self, x, rope, input_pos, kv_len, mask, residual=None):
        """``x [B, T, d_model]`` -> ``[B, T, d_model]``. On the fused path, returns
        ``(ffn_out, h)`` instead, leaving the residual add ``h + ffn_out`` to the next norm."""
        if self.fused_norm:  # Triton RMSNorm with the residual adds fused into the norms
            with annotate("norm"):
                if residual is None:
                    a = self.attention_norm.fused(x)
                else:
                    a, x = self.attention_norm.fused(x, residual=residual)
            with annotate("attn"):
                y = self.attention(a, rope, input_pos, kv_len, mask)
            with annotate("norm"):
                f, h = self.ffn_norm.fused(y, residual=x)
            with annotate("ffn"):
                return self.feed_forward(f), h
        else:
            with annotate("norm"):
                a = self.attention_norm(x)
            with annotate("attn"):
                y = self.attention(a, rope, input_pos, kv_len, mask)
            with annotate("norm"):
                h = x + (self.post_attention_norm(y) if self.sandwich else y)
                f = self.ffn_norm(h)
        with annotate("ffn"):
            y = self.feed_forward(f)
        with annotate("norm"):
            return h + (self.post_ffn_norm(y) if self.sandwich else y)

    def skinny(self, x, rope, input_pos, residual=None):
        """The decode step's block (Triton, ``B * T <= 16`` rows, RMSNorm): five launches for a
        dense GQA block (six with ``switches.rope_in_attention=false``; QK-norm and a mixture of
        experts add theirs: ``zoo.attn``, ``zoo.moe``).

        The attention's kernels (``Attention.skinny``: a qkv GEMV with the attention norm and the
        residual add in its prologue; decode attention with RoPE and the K/V cache write in its
        launch, or one kernel before it; an out_proj GEMV), then the FFN's
        (``FeedForward.skinny``: a w13 GEMV with the FFN norm and residual add in its prologue, a
        w2 GEMV with SwiGLU in its prologue, for the shipped kinds of ``zoo.ffn``). Each GEMV runs
        ``kernels.gemv`` or cuBLAS, whichever measured faster for its shape
        (``kernels.decode_linear``). Returns ``(ffn_out, h)`` like ``forward`` on the fused path.
        x, residual: ``[B, 1, d_model]``.
        """
        with annotate("attn"):
            o, h = self.attention.skinny(x, self.attention_norm, residual, rope, input_pos)
        with annotate("ffn"):
            return self.feed_forward.skinny(o, self.ffn_norm, h)


@contextlib.contextmanager
def _shapes_only():
    """Skip ``torch.nn.init`` while modules are constructed on the meta device (they hold
    shapes, no values; ``init_weights`` draws the weights afterwards). A meta ``normal_`` loads
    torch's Python meta kernels on first use: 1.1 s of a CPU trial child's 2 s build (the same
    trick as ``transformers.modeling_utils.no_init_weights``)."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "zeros_", "ones_", "trunc_normal_")
    old = {n: getattr(nn.init, n) for n in names}
    try:
        for n in names:
            setattr(nn.init, n, lambda t, *a, **k: t)
        yield
    finally:
        for n, f in old.items():
            setattr(nn.init, n, f)


class Transformer(nn.Module):
    """Decoder-only language model built from a ``ModelConfig``.

    Call ``setup_cache(batch, max_seq_len)`` once before ``forward``. Build with
    ``Transformer.build(cfg, device, seed)`` for seeded random weights allocated on the device.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = make_norm(cfg)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.cache: KVCache | None = None

    @classmethod
    def build(cls, cfg: ModelConfig, device="cpu", seed: int = 0, init: bool = True):
        """Validate ``cfg`` and build the model on ``device`` in ``cfg.dtype``.

        Parameters are allocated directly on the device (no CPU float32 copy of an 8B model).
        With ``init``, weights are drawn from N(0, 0.02) (GPT-2 init; output projections scaled by
        ``1/sqrt(2 n_layers)``) from a generator seeded with ``seed``; norms start at 1.

        Raises:
            DesignError: if ``cfg.validate()`` refuses the design (nothing is allocated then).

        ``kernels='auto'`` is resolved for the device first (``ModelConfig.resolved``); the
        model's ``cfg`` holds the kernels it runs.
        """
        dev = torch.device(device)
        cfg = cfg.resolved(dev.type)  # kernels=auto: the device's fastest path
        facts = {"type": dev.type}
        if dev.type == "cuda":
            facts["compute_capability"] = torch.cuda.get_device_capability(dev)
            facts["name"] = torch.cuda.get_device_name(dev)
        cfg.validate(facts)
        with torch.device("meta"), _shapes_only():
            model = cls(cfg)
        # cast on meta (free), then allocate once in the model dtype: no float32 copy on device
        model = model.to(TORCH_DTYPES[cfg.dtype]).to_empty(device=device)
        if cfg.tie_embeddings:  # to_empty breaks the tie
            model.output.weight = model.tok_embeddings.weight
        if init:
            model.init_weights(seed)
        return model.eval().requires_grad_(False)

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Seeded random init (see ``build``); deterministic for a given seed and device."""
        dev = self.tok_embeddings.weight.device
        g = torch.Generator(device=dev).manual_seed(seed)
        out_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        one = 0.0 if self.cfg.norm == "rmsnorm1p" else 1.0  # Gemma's norms scale by 1 + w
        for name, p in self.named_parameters():
            if "norm" in name:
                p.fill_(one if name.endswith("weight") else 0.0)
            elif p.ndim == 1:  # projection biases
                p.zero_()
            else:
                std = out_std if name.endswith(("wo.weight", "w2.weight", ".w2")) else 0.02
                p.normal_(0.0, std, generator=g)

    def setup_cache(self, batch: int, max_seq_len: int) -> KVCache:
        """Allocate the static KV cache and RoPE tables for ``batch`` x ``max_seq_len`` positions.

        Raises:
            ValueError: if ``max_seq_len`` exceeds ``cfg.max_seq_len``.
        """
        if max_seq_len > self.cfg.max_seq_len:
            raise ValueError(f"max_seq_len {max_seq_len} exceeds the design's max_seq_len "
                             f"{self.cfg.max_seq_len}")
        dev = self.tok_embeddings.weight.device
        self.cache = KVCache(self.cfg, batch, max_seq_len, dev)
        for layer in self.layers:
            layer.attention.cache = self.cache
        cos, sin = rope_cache(self.cfg, max_seq_len, dev)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        if self.cfg.rope_local_theta is not None:  # the local layers' own base (Gemma 3)
            local = self.cfg.replace(rope_theta=self.cfg.rope_local_theta, rope_scaling=None)
            cos, sin = rope_cache(local, max_seq_len, dev)
            self.register_buffer("rope_cos_local", cos, persistent=False)
            self.register_buffer("rope_sin_local", sin, persistent=False)
        self.register_buffer("positions", torch.arange(max_seq_len, device=dev), persistent=False)
        pdl = gemv.pdl_supported(dev) and self.cfg.kernels == "triton"
        fold = decode_attention.rope_in_attention()  # RoPE + cache write in the attention launch
        for layer in self.layers:
            layer.attention.pdl, layer.attention.fold_rope = pdl, fold
            if hasattr(layer.feed_forward, "pdl"):  # an MoE FFN's decode-step kernels
                layer.feed_forward.pdl = pdl
        return self.cache

    def skinny_ok(self, tokens: torch.Tensor) -> bool:
        """Whether a call takes the decode GEMV path: one new token per sequence, at most
        ``kernels.gemv.MAX_M`` sequences, RMSNorm blocks (``Block.skinny``); under
        ``torch.compile`` too (the kernels are custom ops there, ``kernels.ops``)."""
        B, T = tokens.shape
        return T == 1 and B <= gemv.MAX_M and self.cfg.norm == "rmsnorm"

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, kv_len: int | None = None,
                last_only: bool = False, masked: bool = False) -> torch.Tensor:
        """Logits for ``tokens`` placed at ``input_pos``, attending to the cache.

        Args:
            tokens: ``[B, T]`` int64 token ids.
            input_pos: ``[T]`` int64 positions of these tokens (same for every sequence).
            kv_len: attend to cache positions ``[0, kv_len)``, which must be ``input_pos[-1] + 1``
                unless ``masked``. ``None`` means the whole cache, masked.
            last_only: compute the LM head for the last position only (prefill needs just that).
            masked: ``kv_len`` is only an upper bound (a CUDA-graph bucket): positions after each
                token's own are masked out, so the step is shape-static for a given ``kv_len``.

        Returns:
            ``[B, T, vocab_size]`` logits (``[B, 1, vocab_size]`` with ``last_only``), model dtype.

        Raises:
            RuntimeError: ``setup_cache`` was not called first.
        """
        if self.cache is None:
            raise RuntimeError("call setup_cache(batch, max_seq_len) before forward")
        T = tokens.shape[1]
        triton = self.cfg.kernels == "triton"
        mask = None
        if triton and T == 1:
            pass  # the decode kernel reads the length from input_pos: no mask, no bucket
        elif kv_len is None or masked or not (T == 1 or T == kv_len):
            kv_len = kv_len or self.cache.max_seq_len
            mask = self.positions[None, :kv_len] <= input_pos[:, None]  # [T, kv_len] bool
        if triton:  # the RoPE kernel indexes the full tables by position itself
            rope = (self.rope_cos, self.rope_sin)
        else:
            rope = (self.rope_cos[input_pos], self.rope_sin[input_pos])
        ropes = [rope] * self.cfg.n_layers
        if self.cfg.rope_local_theta is not None:  # torch path only (zoo.torch_only)
            local = (self.rope_cos_local[input_pos], self.rope_sin_local[input_pos])
            ropes = [local if declared_local(self.cfg, i) else rope
                     for i in range(self.cfg.n_layers)]
        x = self.tok_embeddings(tokens)
        if self.cfg.embed_scale:  # Gemma: sqrt(d_model), rounded to the model dtype first
            x = x * torch.tensor(self.cfg.d_model**0.5, dtype=x.dtype)
        residual = None
        if triton and self.skinny_ok(tokens):  # the decode step: see Block.skinny
            for i, layer in enumerate(self.layers):
                with annotate(f"layer{i}"):
                    x, residual = layer.skinny(x, rope, input_pos, residual)
            with annotate("lm_head"):
                return ops.linear(x[:, -1:], self.output, "norm", self.norm,
                                            residual[:, -1:])[0]
        for i, layer in enumerate(self.layers):
            with annotate(f"layer{i}"):
                if layer.fused_norm:
                    x, residual = layer(x, rope, input_pos, kv_len, mask, residual)
                else:
                    x = layer(x, ropes[i], input_pos, kv_len, mask)
        if last_only:
            x = x[:, -1:]
            residual = residual[:, -1:] if residual is not None else None
        with annotate("norm"):
            x = self.norm(x) if residual is None else self.norm.fused(x, residual=residual)[0]
        with annotate("lm_head"):
            return self.output(x)
