"""Attention kinds: each says once what the rest of the project reads of a design's attention.

A kind declares, beside its ``nn.Module``: its parameters, matmul and elementwise FLOPs, the
activations it holds and the KV-cache bytes per token (``zoo.counts``), the kernels a stage
launches (``kernels``: ``sweep.analysis.predict.kernel_list``), its profiler ranges and their
module kinds (``sweep.measure.modules``), and its linear layers on the decode GEMV path
(``sweep.measure.trial``). The same pattern as ``zoo.ffn`` (torchtitan's model spec).

Shipped: ``gqa`` (``GQA``): grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245) with
RoPE and a static KV cache, which covers MHA (``n_kv_heads == n_heads``) and MQA (1), local
(sliding-window) layers and attention sinks: its counts and kernels take the layer's window
(``windows``: the design's layers grouped by it; ``attended``: what one token reads). Every design
is ``gqa`` but those with ``kv_lora_rank > 0``: multi-head latent attention (``MLA``, DeepSeek-V2's;
``zoo.latent``). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ModelConfig
from .formats import DTYPE_BYTES
from .kinds import Kinds, module_class
from .launches import NORM_LAUNCHES, Kernel, Stage

_KINDS = Kinds("attention kind")
# latent attention's torch ops (zoo.mla_attention, counted as tests/test_launches.py counts): RoPE
# on the query's and the key's RoPE parts, 9 each (the float cast, four products, the difference
# and sum, the stack, the cast back); the torch path's absorbed decode between its two GEMMs (16:
# casts of the query, the latents twice, the RoPE parts and W_UK / W_UV, the latents' two
# matmuls, the RoPE scores' matmul and add, the scale, the mask's negation, masked_fill, softmax,
# the cast back); the Triton path's attention launches (kernels.mla_decode.launches: the split
# kernel and the merge; a test holds them equal)
MLA_ROPE_LAUNCHES = 18
MLA_TORCH_DECODE_LAUNCHES = 16
MLA_DECODE_LAUNCHES = 2
# up to this many sequences (one sequence: below this many heads) MLA's W_UK / W_UV are a GEMV
# per head on the Triton path (kernels.head_gemv.per_head_gemv; tests/kernels/test_head_gemv.py
# ties the two)
HEAD_GEMV_ROWS, HEAD_GEMV_MANY = 16, 64


def kv_scale_bytes(cfg: ModelConfig) -> int:
    """Bytes of a quantized cache's scale per token and KV head (one float32 for K, one for V:
    this counts one), 0 for a cache in an activation dtype."""
    return 4 if cfg.kv_dtype in ("int8", "fp8_e4m3") else 0


def _qk_norm_params(cfg: ModelConfig) -> int:
    """The QK-norm weights of one layer: ``2 head_dim`` (per head, shared by the heads),
    ``q_dim + kv_dim`` (over the projections), 0 without."""
    return {"none": 0, "head": 2 * cfg.head_dim, "full": cfg.q_dim + cfg.kv_dim}[cfg.qk_norm]


@dataclass(frozen=True)
class GQA:
    """Grouped-query attention: ``wqkv [(n_heads + 2 n_kv_heads) head_dim, d_model]`` (q, k, v
    stacked, optional bias), RoPE on q and k, the K/V cache written, scores over ``context``
    positions, ``wo [d_model, n_heads head_dim]``.

    Attributes:
        name: the kind's name.
        module: ``"package.module:Class"`` of its ``nn.Module`` (``build``).
        ranges: its profiler ranges (``zoo.nvtx.annotate``) and the module kind each times.
    """

    name: str = "gqa"
    module: str = "zoo.attention:Attention"
    ranges: tuple = (("qkv", "qkv"), ("qk_norm", "norms_elementwise"), ("attention", "attention"),
                     ("out_proj", "out_proj"))

    def params(self, cfg: ModelConfig) -> int:
        """Parameters per layer: ``wqkv`` (and its bias), ``wo`` (and its bias), the QK-norm
        weights (``head_dim`` twice per head, or ``q_dim + kv_dim`` over the projections) and
        the attention sinks (one per query head)."""
        n = cfg.q_dim + 2 * cfg.kv_dim
        return (cfg.d_model * n + n * cfg.qkv_bias + cfg.q_dim * cfg.d_model
                + cfg.d_model * cfg.out_bias + cfg.n_heads * cfg.attn_sinks + _qk_norm_params(cfg))

    def flops(self, cfg: ModelConfig, batch: int, new: int, context: int) -> dict:
        """Matmul FLOP per layer for ``new`` tokens per sequence over ``context`` positions:
        ``qkv = 2 N d (H + 2 Hkv) D``, ``attention = 4 B H D new context`` (``Q K^T`` and ``P V``),
        ``out_proj = 2 N H D d`` (``N = B new``)."""
        d, H, Hkv, D, N = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, batch * new
        return {"qkv": 2 * N * d * (H + 2 * Hkv) * D, "attention": 4 * batch * H * D * new * context,
                "out_proj": 2 * N * H * D * d}

    def elementwise_flops(self, cfg: ModelConfig, batch: int, new: int, context: int) -> int:
        """Per layer (estimate): softmax about 5 FLOP per score, RoPE 3 per q / k channel."""
        H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        return 5 * batch * H * new * context + 3 * batch * new * (H + Hkv) * D \
            + (4 * batch * new * (H + Hkv) * D if cfg.qk_norm != "none" else 0)

    def kv_bytes_per_token(self, cfg: ModelConfig) -> int:
        """KV-cache bytes per token per sequence and layer: ``2 Hkv (D bytes(kv_dtype) +
        scale)``."""
        return 2 * cfg.n_kv_heads * (cfg.head_dim * DTYPE_BYTES[cfg.kv_dtype] + kv_scale_bytes(cfg))

    def hidden_per_token(self, cfg: ModelConfig) -> int:
        """Elements a prefill holds per token of its own: the qkv projection."""
        return cfg.q_dim + 2 * cfg.kv_dim

    def kernels(self, st: Stage, fold: bool, launches_decode, rep: int | None = None,
                window: int | None = None) -> list[Kernel]:
        """The attention's kernels in stage ``st`` after its norm, for ``rep`` layers (default
        all) attending over ``window`` positions (None: full): the qkv projection (the norm
        and residual add in its prologue on the GEMV path), RoPE and the cache write (one Triton
        kernel, or in the decode attention's launch with ``fold``, always on a local layer's
        ring; two torch ops), the attention (decode: one token against the cache, or a local
        layer's ring of ``window`` slots, ``launches_decode(B, Hkv, G, D, S, quantized)`` Triton
        launches; prefill: SDPA, or blocks of query rows for a local or sink layer (``zoo.gqa``),
        priced from the SDPA
        entry of its shape), the output projection."""
        cfg, M, batch, new = st.cfg, st.M, st.batch, st.new
        context = attended(st.context, window)
        fold = fold or window is not None
        d, H, Hkv, D = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        L = cfg.n_layers if rep is None else rep
        wb, kvb = st.wb, DTYPE_BYTES[cfg.kv_dtype]
        rope_bytes, kv_bytes = 2 * M * (H + Hkv) * D * wb, 2 * M * Hkv * D * (wb + kvb)
        out = [st.gemm("qkv", "wqkv", cfg.q_dim + 2 * cfg.kv_dim, d, rep=L,
                       prologue="norm+res" + ("+bias" if cfg.qkv_bias else ""))]
        if cfg.qk_norm != "none" and st.fused:  # one kernel (kernels.qk_norm): both norms
            # from the qkv rows, and v copied dense for several rows; priced as one RMSNorm
            # launch of those bytes (read and written)
            q_b, k_b = 2 * M * H * D * wb, 2 * M * Hkv * D * wb
            out.append(st.elem("rmsnorm", q_b + 2 * k_b if M > 1 else q_b + k_b, rep=L,
                               launches=1))
        elif cfg.qk_norm != "none":  # two RMSNorms (queries, keys) of torch's ops, each priced
            # at its own bytes (read and written): every launch pays its own fixed cost (one
            # entry of their summed bytes priced five launches as one: OLMoE's decode step 150
            # us short at batch 8, results/reference/moe_modules_h100)
            q_b, k_b = 2 * M * H * D * wb, 2 * M * Hkv * D * wb
            nl = NORM_LAUNCHES["rmsnorm1p" if cfg.norm == "rmsnorm1p" else "rmsnorm"]
            out += [st.elem("rmsnorm", b, rep=L, launches=nl) for b in (q_b, k_b)]
        if st.fused and new == 1 and fold:
            pass  # folded into the decode attention launch (zoo.attention; its bytes are a token's)
        elif st.fused:  # one kernel: RoPE and the cache write (priced on their bytes together)
            out.append(st.elem("rope", rope_bytes + kv_bytes, rep=L))
        else:
            out += [st.elem("rope", rope_bytes, rep=L), st.elem("kv_write", kv_bytes, rep=L)]
        if new == 1:
            scale = kv_scale_bytes(cfg)  # > 0: a quantized cache
            kv_read = 2 * batch * Hkv * context * (D * kvb + scale)
            n = (launches_decode(batch, Hkv, H // Hkv, D, context, scale > 0) if st.fused
                 else st.launches("decode_attn"))
            out.append(Kernel("attention", "decode_attn", "decode_attention",
                              4 * batch * H * D * context, kv_read,
                              {"impl": st.impl, "kv_dtype": cfg.kv_dtype, "bytes": kv_read,
                               "B": batch, "Hkv": Hkv, "G": H // Hkv, "S": context, "D": D,
                               # a local layer's cache is a ring of its window, wrapped once
                               # the window is full (its calibration entry is a ring's too)
                               "window": window, "ring": int(window is not None
                                                             and window <= st.context)},
                              n, L))
        else:
            out.append(Kernel("attention", "prefill_attn", "sdpa",
                              2 * batch * H * D * new * context, 2 * M * (H + 2 * Hkv) * D * wb,
                              {"B": batch, "H": H, "T": new, "D": D, "G": H // Hkv,
                               "impl": st.impl,
                               # a local or sink layer's own kernel (the band's; its entry)
                               "W": context if window is not None else 0,
                               "sink": int(cfg.attn_sinks)}, st.launches("prefill_attn"), L))
        out.append(st.gemm("out_proj", "wo", d, cfg.q_dim, rep=L))
        return out

    def decode_linears(self, attn) -> list[tuple]:
        """``(range, nn.Linear, prologue)`` of the module ``attn``'s layers on the decode GEMV
        path."""
        return [("qkv", attn.wqkv, "norm"), ("out_proj", attn.wo, "none")]

    def build(self, cfg: ModelConfig, layer: int):
        """The attention's ``nn.Module`` for ``cfg`` at block ``layer`` (its class imported now)."""
        return module_class(self.module)(cfg, layer)


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (``zoo.latent``, ``zoo.mla_attention``): queries (through a
    rank ``q_lora_rank`` bottleneck where set), one latent of ``kv_lora_rank`` plus a decoupled
    rotated key of ``qk_rope_head_dim`` per token cached, every head's key and value expanded
    from the latent. Counted in the absorbed form for a decode step (``q_nope W_UK`` scored
    against the latents, ``W_UV`` after the softmax: FlashMLA's) and the expanded form for a
    prefill (``kv_b`` over the prompt once, then attention of ``qk`` / ``v`` wide heads)."""

    name: str = "mla"
    module: str = "zoo.mla_attention:MLAttention"
    ranges: tuple = (("qkv", "qkv"), ("attention", "attention"), ("out_proj", "out_proj"))

    def _q_params(self, cfg: ModelConfig) -> int:
        qk = cfg.n_heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
        r = cfg.q_lora_rank
        return cfg.d_model * r + r + r * qk if r else cfg.d_model * qk

    def params(self, cfg: ModelConfig) -> int:
        """Per layer: the query projection(s) and its norm, the latent projection (the two
        stacked as ``wqkv_a``), the latent's norm, ``wkv_b``, ``wo``."""
        H, r = cfg.n_heads, cfg.kv_lora_rank
        return (self._q_params(cfg) + cfg.d_model * (r + cfg.qk_rope_head_dim) + r
                + r * H * (cfg.qk_nope_head_dim + cfg.v_head_dim) + H * cfg.v_head_dim * cfg.d_model)

    def flops(self, cfg: ModelConfig, batch: int, new: int, context: int) -> dict:
        """Matmul FLOP per layer (class doc): ``qkv`` the query and latent projections;
        ``attention`` decode: ``2 N H nope r`` (absorb) + ``2 B H C (2 r + rope)`` (scores and
        latent values) + ``2 N H r v`` (expand); prefill: ``2 B C r H (nope + v)`` (expand) +
        ``2 B H new C (qk + v)``; ``out_proj = 2 N H v d``."""
        d, H, r, R = cfg.d_model, cfg.n_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
        nope, V, N = cfg.qk_nope_head_dim, cfg.v_head_dim, batch * new
        if new == 1:
            att = 2 * N * H * nope * r + 2 * batch * H * context * (2 * r + R) + 2 * N * H * r * V
        else:
            att = 2 * batch * context * r * H * (nope + V) + 2 * batch * H * new * context * (
                nope + R + V)
        return {"qkv": 2 * N * (self._q_params(cfg) + d * (r + R)), "attention": att,
                "out_proj": 2 * N * H * V * d}

    def elementwise_flops(self, cfg: ModelConfig, batch: int, new: int, context: int) -> int:
        """Per layer (estimate): softmax 5 FLOP per score, RoPE 3 per rotated channel, the
        latent's (and the query's) RMSNorm 4 per channel."""
        H, R = cfg.n_heads, cfg.qk_rope_head_dim
        return (5 * batch * H * new * context + 3 * batch * new * (H + 1) * R
                + 4 * batch * new * (cfg.kv_lora_rank + cfg.q_lora_rank))

    def kv_bytes_per_token(self, cfg: ModelConfig) -> int:
        """Cache bytes per token per sequence and layer: ``(kv_lora_rank + qk_rope_head_dim)
        bytes(kv_dtype)``."""
        return (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * DTYPE_BYTES[cfg.kv_dtype]

    def hidden_per_token(self, cfg: ModelConfig) -> int:
        """Elements a prefill holds per token: the queries, the latent and the rotated key, the
        expanded keys and values."""
        H = cfg.n_heads
        return (H * (2 * cfg.qk_nope_head_dim + 2 * cfg.qk_rope_head_dim + cfg.v_head_dim)
                + cfg.kv_lora_rank + cfg.qk_rope_head_dim)

    def kernels(self, st: Stage, fold: bool, launches_decode, rep: int | None = None,
                window: int | None = None) -> list[Kernel]:
        """The kernels of ``rep`` layers (``zoo.mla_attention``), counted as
        ``tests/test_launches.py`` counts the torch path's. The query projection (or its
        bottleneck's down-projection) stacked over the latent projection as one GEMM ``wqkv_a``
        (then the bottleneck's RMSNorm and ``wq_b``; on the decode GEMV path GEMVs, the block's
        norm in ``wqkv_a``'s prologue, the bottleneck's in ``wq_b``'s). On
        the torch path RoPE on the query's and the key's RoPE parts (``MLA_ROPE_LAUNCHES`` ops), the
        latent's RMSNorm and the cache write (two copies); on the Triton path the three in one
        launch (``kernels.mla_rope``, priced by the Triton RoPE kernel's entry at its bytes). A
        decode step in the absorbed form: ``q_nope W_UK`` and ``W_UV`` as GEMMs of ``batch`` rows
        over ``H kv_lora_rank`` and ``H v_head_dim`` columns (the FLOPs and weight bytes of that
        one GEMM: on the Triton path, up to 16 sequences (one: below 64 heads), a GEMV per head,
        ``kernels.head_gemv``, priced as the stage's GEMV of that shape; else a batched GEMM over
        the heads, priced as a GEMM, and above batch 1 on the Triton path the heads' outputs
        gathered for ``wo``, a copy); between them the attention over the latents: on the Triton
        path ``kernels.mla_decode`` (its own ``decode_attn`` entry, ``impl`` mla: the latent ``D``
        and RoPE ``R`` wide, one KV head shared by ``G = n_heads``, two launches), on the torch
        path its float32 ops (``MLA_TORCH_DECODE_LAUNCHES``, priced by the torch decode entry of
        its shape). A prefill
        expands the latents through ``wkv_b``, builds the heads' keys (and on the torch path their
        queries: two concatenations), attends through SDPA and reshapes its output (a copy). The
        output projection."""
        cfg, M, batch, new, C = st.cfg, st.M, st.batch, st.new, st.context
        H, r, R, wb = cfg.n_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim, st.wb
        nope, V, d = cfg.qk_nope_head_dim, cfg.v_head_dim, cfg.d_model
        L, qk = cfg.n_layers if rep is None else rep, nope + R
        f = self.flops(cfg, batch, new, C)

        def torch_op(op, like, nbytes, launches):  # torch ops priced by the entry ``like``
            return st.elem(op, nbytes, rep=L, launches=launches, like=like, impl="torch")

        per_head = st.fused and batch <= HEAD_GEMV_ROWS and (batch > 1 or H < HEAD_GEMV_MANY)

        def bmm(op, n, k):  # [M, k] x [k, n] per head, keyed as the one GEMM of its FLOPs and
            # weight bytes: on the Triton path up to 16 sequences a GEMV per head
            # (kernels.head_gemv), priced by the stage's GEMV entry of that shape; else a
            # batched GEMM over the heads (cuBLAS), priced as a GEMM
            g = st.gemm("attention", op, H * n, k, rep=L)
            if per_head:
                return g
            nbytes = H * n * k * cfg.weight_bits / 8 + M * H * (n + k) * wb
            return Kernel(g.module, "gemm", op, g.flops, nbytes,
                          {k_: v for k_, v in g.shape.items() if k_ != "prologue"}, 1, L)

        # the query projection (or its bottleneck) stacked over the latent projection, one
        # GEMM; on the decode GEMV path the block's norm (and the residual add) in its prologue
        # (zoo.mla_attention.MLAttention.skinny)
        q = cfg.q_lora_rank or H * qk
        out = [st.gemm("qkv", "wqkv_a", q + r + R, d, rep=L, prologue="norm+res")]
        if cfg.q_lora_rank:
            out += [st.elem("rmsnorm", 2 * M * q * wb, rep=L, in_prologue=True),
                    st.gemm("qkv", "wq_b", H * qk, q, rep=L, prologue="norm")]
        if st.fused:  # kernels.mla_rope: RoPE, the latent's norm and the cache write, one launch
            nbytes = (2 * H * R + 2 * (r + R)) * M * wb  # the RoPE parts read and written, the
            out.append(st.elem("mla_rope", nbytes, rep=L, launches=1, like="rope"))  # latent, key
        else:
            out += [torch_op("rope", "rope", 2 * M * (H + 1) * R * wb, MLA_ROPE_LAUNCHES),
                    st.elem("rmsnorm", 2 * M * r * wb, rep=L),
                    torch_op("kv_write", "kv_write", 2 * M * (r + R) * wb, 2)]
        kvb = DTYPE_BYTES[cfg.kv_dtype]
        kv = batch * C * (r + R) * kvb
        if new == 1:
            out.append(bmm("w_uk", r, nope))
            if st.fused:
                out.append(Kernel("attention", "decode_attn", "mla_decode",
                                  f["attention"] - 2 * M * H * r * (nope + V), kv,
                                  {"impl": "mla", "kv_dtype": cfg.kv_dtype, "bytes": kv,
                                   "B": batch, "Hkv": 1, "G": H, "S": C, "D": r, "R": R},
                                  MLA_DECODE_LAUNCHES, L))
            else:
                out.append(Kernel("attention", "decode_attn", "decode_attention",
                                  f["attention"] - 2 * M * H * r * (nope + V), kv,
                                  {"impl": "torch", "kv_dtype": cfg.kv_dtype, "bytes": kv,
                                   "B": batch, "Hkv": H, "G": 1, "S": C, "D": qk},
                                  MLA_TORCH_DECODE_LAUNCHES, L))
            out.append(bmm("w_uv", V, r))  # a GEMV per head writes it as wo reads it
            if st.fused and not per_head and batch > 1:  # [H, B, v] -> [B, H v] for wo
                out.append(torch_op("mla_gather", "kv_write", 2 * M * H * V * wb, 1))
        else:
            # the heads' keys built (and, on the torch path, their queries: the Triton path
            # rotated them in place)
            cat = 2 * (batch * C + M * (not st.fused)) * H * qk * wb
            out += [st.gemm("attention", "wkv_b", H * (nope + V), r, m=batch * C, rep=L),
                    torch_op("mla_concat", "kv_write", cat, 1 + (not st.fused)),
                    # causal: half the 2 B H new C (qk + v) of the full products, as GQA's
                    # kernel counts (its SDPA entries' FLOP/s are on that count); q, k, v read
                    # and the output written once
                    Kernel("attention", "prefill_attn", "sdpa", batch * H * new * C * (qk + V),
                           (M + batch * C) * H * (qk + V) * wb,
                           {"B": batch, "H": H, "T": new, "D": qk, "G": 1, "impl": st.impl},
                           st.launches("prefill_attn"), L),
                    torch_op("mla_gather", "kv_write", 2 * M * H * V * wb, 1)]
        out.append(st.gemm("out_proj", "wo", d, H * V, rep=L))
        return out

    def decode_linears(self, attn) -> list[tuple]:
        """``(range, nn.Linear, prologue)`` of the module ``attn``'s layers on the decode GEMV
        path (``zoo.mla_attention.MLAttention.skinny``)."""
        out = [("qkv", attn.wqkv_a, "norm")]
        if attn.cfg.q_lora_rank:
            out.append(("qkv", attn.wq_b, "norm"))
        return out + [("out_proj", attn.wo, "none")]

    def build(self, cfg: ModelConfig, layer: int):
        """The attention's ``nn.Module`` for ``cfg`` at block ``layer``."""
        return module_class(self.module)(cfg, layer)


def register(k) -> None:
    """Register attention kind ``k`` under ``k.name``.

    Raises:
        ValueError: another kind of that name is registered already.
    """
    _KINDS.register(k)


def kind(cfg: ModelConfig):
    """The attention kind of design ``cfg``: ``mla`` with ``kv_lora_rank > 0``, else ``gqa``
    (whose layers differ only in the window they attend over: ``windows``)."""
    return _KINDS.get("mla" if cfg.kv_lora_rank else "gqa")


def windows(cfg: ModelConfig) -> list[tuple[int | None, int]]:
    """``(window, layers)`` of design ``cfg``: how many layers attend over each window (None:
    full attention), in order of first appearance; ``[(None, n_layers)]`` for a design without
    local layers (``zoo.layer_types``)."""
    out: dict[int | None, int] = {}
    for i in range(cfg.n_layers):
        w = cfg.layer_window(i)
        out[w] = out.get(w, 0) + 1
    return list(out.items())


def attended(context: int, window: int | None) -> int:
    """Positions a token attends to in a layer of ``window`` (None: full) when ``context``
    positions precede it, its own included: ``min(context, window)``. A prefill of ``T``
    tokens is counted as ``T`` tokens over ``min(T, window)`` positions each (the full ``T x T``
    score matrix for a global layer, as for SDPA; a local layer's band)."""
    return context if window is None else min(context, window)


def ranges() -> dict[str, str]:
    """Every registered kind's profiler ranges -> module kind."""
    return _KINDS.ranges()


register(GQA())
register(MLA())
