"""Analytic counts for a design and a workload: parameters, FLOPs and minimum DRAM bytes per stage.

Conventions (the same as ``torch.utils.flop_counter.FlopCounterMode``, so the two can be compared):

- A multiply-accumulate is 2 FLOP. A matmul ``[M, K] @ [K, N]`` is ``2 M N K`` FLOP
  (Kaplan et al. 2020, arXiv:2001.08361, Table 1; Chowdhery et al. 2022 PaLM, App. B, used by
  nanoGPT's ``estimate_mfu``).
- Per layer and per new token, with ``H = n_heads``, ``Hkv = n_kv_heads``, ``D = head_dim``,
  ``d = d_model``, ``F = ffn_dim``, ``S`` = attended positions:
  ``qkv = 2 d (H + 2 Hkv) D``; ``attn = 4 H D S`` (``Q K^T`` and ``P V``, 2 H D S each);
  ``out_proj = 2 H D d``; ``ffn = 6 d F`` (SwiGLU: gate, up, down) or ``4 d F`` (GELU);
  ``lm_head = 2 d V`` per position whose logits are computed (one per sequence in prefill and in
  decode: the zoo computes only the last position's logits).
- Prefill attention counts the full ``T x T`` score matrix, as FlopCounterMode does for
  ``scaled_dot_product_attention`` (and Megatron-LM's MFU formula, Narayanan et al. 2021,
  arXiv:2104.04473); a causal kernel that skips masked tiles executes about half of it.
- Not counted by FlopCounterMode and kept out of ``matmul`` totals here: softmax, norms, RoPE,
  activations, residual adds and the embedding gather. They are estimated separately in
  ``elementwise`` (softmax about 5 FLOP per score, RMSNorm about 4 per channel, RoPE 3 per q/k
  channel, SwiGLU about 5 per hidden unit, residual adds 1 per channel); for the shipped shapes
  they are under 1% of the matmul FLOPs. MFU uses the matmul total.

Minimum DRAM bytes are a lower bound for one stage: every weight read once (the embedding table
only for the rows gathered, unless tied to the LM head, which reads it whole; a mixture of experts'
experts only where a token routes to them, their expected number under uniform routing:
``zoo.moe.expected_touched``), the KV cache read
once over the attended positions and written once for the new tokens, and the residual stream
read and written once per layer (activations; they matter for prefill only). Logits are written
once. Memory-bandwidth utilization (MBU = min bytes / time / peak bandwidth) follows Databricks'
"LLM Inference Performance Engineering: Best Practices" (2023).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import attn as attn_kinds
from . import ffn as ffn_kinds
from .config import ModelConfig
from .formats import DTYPE_BYTES

# The module kinds of a forward step, spelled here once: the counts' FLOPs, the performance model's
# prices (with its launch overhead), the profiler ranges' modules and the row's columns all name
# them so. ``KINDS``: the kinds with matmul FLOPs (every one but the norms and elementwise ops).
MODULES = ("qkv", "attention", "out_proj", "ffn", "lm_head", "norms_elementwise")
KINDS = MODULES[:5]


@dataclass(frozen=True)
class Params:
    """Parameter counts (numbers of scalars).

    ``total`` counts a tied embedding once. ``non_embedding`` excludes the token-embedding table
    and the LM-head matrix (tied or not), following Kaplan et al. 2020 (arXiv:2001.08361, Sec. 2.1).
    ``active``: the parameters one token uses (a mixture of experts' ``k + S`` experts per layer
    instead of all; embedding and LM head included, as Mixtral's "12.9B active" counts them);
    ``total`` for a dense design. ``per_layer``: the last block's (an MoE design's MoE block).
    """

    total: int
    non_embedding: int
    embedding: int
    lm_head: int
    per_layer: int
    active: int = 0


def params(cfg: ModelConfig) -> Params:
    """Parameter counts of the zoo model for ``cfg`` (equal to ``sum(p.numel())`` of the module)."""
    d, V = cfg.d_model, cfg.vocab_size
    norm = 2 * d if cfg.norm == "layernorm" else d
    att = attn_kinds.kind(cfg).params(cfg) + (4 if cfg.sandwich_norm else 2) * norm
    groups = ffn_kinds.groups(cfg)
    layers = sum(n * (att + k.params(cfg)) for k, n in groups)
    idle = sum(n * (k.params(cfg) - k.active_params(cfg)) for k, n in groups)
    emb = V * d
    head = 0 if cfg.tie_embeddings else V * d
    total = emb + head + layers + norm
    return Params(total=total, non_embedding=total - emb - head, embedding=emb, lm_head=V * d,
                  per_layer=att + ffn_kinds.kind(cfg).params(cfg), active=total - idle)


@dataclass(frozen=True)
class StageCounts:
    """FLOPs (FLOP) and minimum DRAM traffic (bytes) of one stage.

    ``flops`` maps each kind in ``KINDS`` to its matmul FLOPs; ``matmul_flops`` is their sum;
    ``elementwise_flops`` is the estimate of what the matmul count leaves out (see module doc).
    ``bytes`` maps ``weights``, ``kv_read``, ``kv_write``, ``activations``, ``logits`` to bytes;
    ``min_bytes`` is their sum; ``arithmetic_intensity`` is ``matmul_flops / min_bytes`` (FLOP/byte).
    """

    tokens: int
    flops: dict
    matmul_flops: int
    elementwise_flops: int
    bytes: dict
    min_bytes: int

    @property
    def arithmetic_intensity(self) -> float:
        """``matmul_flops / min_bytes`` (FLOP/byte): where the stage sits on the roofline."""
        return self.matmul_flops / self.min_bytes

    def to_dict(self) -> dict:
        """The fields as a plain dict (FLOP, bytes) with ``arithmetic_intensity`` (FLOP/byte)."""
        return dict(asdict(self), arithmetic_intensity=self.arithmetic_intensity)


def stage(cfg: ModelConfig, batch: int, new: int, context: int, logits_per_seq: int = 1,
          skew: float = 0.0) -> StageCounts:
    """Counts for one forward over ``new`` tokens per sequence that attend to ``context`` positions.

    Args:
        cfg: the design.
        batch: sequences.
        new: tokens per sequence in this forward (prompt length for prefill, 1 for decode).
        context: positions attended by each new token, the new ones included (prefill: ``new``;
            decode at cache length ``L``: ``L + 1``).
        logits_per_seq: positions per sequence whose logits are computed.
    """
    d, V, L = cfg.d_model, cfg.vocab_size, cfg.n_layers
    N = batch * new
    att, groups = attn_kinds.kind(cfg), ffn_kinds.groups(cfg)
    # each layer over the positions its window lets it attend (zoo.attn.attended)
    spans = [(attn_kinds.attended(context, w), n) for w, n in attn_kinds.windows(cfg)]
    flops = {k: 0 for k in ("qkv", "attention", "out_proj")}
    for ctx, n in spans:
        for k, v in att.flops(cfg, batch, new, ctx).items():
            flops[k] += n * v
    flops["ffn"] = sum(n * k.flops(cfg, N) for k, n in groups)
    flops["lm_head"] = 2 * batch * logits_per_seq * d * V
    elementwise = (sum(n * att.elementwise_flops(cfg, batch, new, ctx) for ctx, n in spans)
                   + L * (2 * 4 * N * d                                # two norms
                          + 2 * N * d)                                 # residual adds
                   + sum(n * k.elementwise_flops(cfg, N) for k, n in groups))  # activation
    wb = DTYPE_BYTES[cfg.dtype]
    p = params(cfg)
    # gathered embedding rows, at most the whole table; tied: the LM head reads it all anyway
    emb_rows = 0 if cfg.tie_embeddings else min(N, V) * d
    # the experts no token of this forward routes to are not read (``zoo.moe.read_params``)
    unread = sum(n * (k.params(cfg) - k.read_params(cfg, N, skew)) for k, n in groups)
    b = {
        # weights at their format's bits (cfg.weight_bits: 16 for bf16, 4.5 for q4_0, ...)
        "weights": (p.non_embedding - unread + p.lm_head + emb_rows) * cfg.weight_bits / 8,
        "kv_read": batch * sum(ctx * n for ctx, n in spans) * att.kv_bytes_per_token(cfg),
        # a local layer's ring keeps the last min(new, window) of a prefill's tokens
        "kv_write": batch * sum(n * attn_kinds.attended(new, w)
                                for w, n in attn_kinds.windows(cfg)) * att.kv_bytes_per_token(cfg),
        "activations": L * 2 * N * d * wb if new > 1 else 0,
        "logits": batch * logits_per_seq * V * wb,
    }
    return StageCounts(tokens=N, flops=flops, matmul_flops=sum(flops.values()),
                       elementwise_flops=elementwise, bytes=b, min_bytes=sum(b.values()))


def expert_bytes(cfg: ModelConfig) -> float:
    """Bytes (at ``cfg.weight_bits``) of one routed expert in each of the design's MoE layers:
    what a forward reads more when its tokens touch one expert a layer more than
    ``zoo.moe.read_params`` expects (``sweep.analysis.derived``: the measured routing); 0 for a
    design without MoE layers."""
    return sum(n * k.expert_params(cfg) for k, n in ffn_kinds.groups(cfg)
               if hasattr(k, "expert_params")) * cfg.weight_bits / 8


def prefill(cfg: ModelConfig, batch: int, prompt_len: int, skew: float = 0.0) -> StageCounts:
    """Counts for the prefill of ``batch`` prompts of ``prompt_len`` tokens (last-position logits;
    ``skew``: the workload's ``routing_skew``)."""
    return stage(cfg, batch, prompt_len, prompt_len, skew=skew)


def decode_step(cfg: ModelConfig, batch: int, cache_len: int, skew: float = 0.0) -> StageCounts:
    """Counts for one decode step with ``cache_len`` positions already cached per sequence."""
    return stage(cfg, batch, 1, cache_len + 1, skew=skew)


def mean_decode_context(prompt_len: int, new_tokens: int) -> int:
    """Positions attended by the mean decode step of a workload: the ``new_tokens - 1`` steps
    after a ``prompt_len`` prefill attend ``prompt_len + 1 .. prompt_len + steps`` positions;
    FLOPs and bytes are linear in that, so the mean step attends ``prompt_len + (steps - 1) // 2
    + 1`` (rounded down). The one definition: counts, the predictor and the calibration use it."""
    steps = max(new_tokens - 1, 1)
    return prompt_len + (steps - 1) // 2 + 1


def decode_mean(cfg: ModelConfig, batch: int, prompt_len: int, new_tokens: int,
                skew: float = 0.0) -> StageCounts:
    """Mean counts over the ``new_tokens - 1`` decode steps that follow a ``prompt_len`` prefill:
    one step attending ``mean_decode_context`` positions (FLOPs and bytes are linear in it)."""
    return stage(cfg, batch, 1, mean_decode_context(prompt_len, new_tokens), skew=skew)


def kv_bytes_per_token(cfg: ModelConfig) -> int:
    """KV-cache bytes per token per sequence: ``2 n_layers n_kv_heads head_dim bytes(kv_dtype)``
    (plus one fp32 scale per layer, K/V and head for quantized caches)."""
    return cfg.n_layers * attn_kinds.kind(cfg).kv_bytes_per_token(cfg)


def kv_cache_bytes(cfg: ModelConfig, batch: int, positions: int) -> int:
    """Bytes of the static KV cache for ``batch`` sequences of ``positions`` positions: a local
    layer holds only its window (a ring, ``zoo.cache``), the others every position."""
    per_layer = attn_kinds.kind(cfg).kv_bytes_per_token(cfg)
    return batch * per_layer * sum(n * attn_kinds.attended(positions, w)
                                   for w, n in attn_kinds.windows(cfg))


def memory_need(cfg: ModelConfig, batch: int, prompt_len: int, new_tokens: int,
                scores: bool = False) -> dict:
    """Bytes a run of the workload holds at its peak, by part (an estimate from the shapes, no
    allocator): ``weights`` (every parameter at the weight format's ``cfg.weight_bits``, a tied
    embedding once: a quantized format's designs fit where their weights do), ``kv_cache`` (the static
    cache of ``prompt_len + new_tokens`` positions per sequence, a local layer's window:
    ``kv_cache_bytes``), ``activations`` (the prefill's
    live tensors per token: residual stream, normed input and attention output (3 d), the qkv
    projection (H + 2 Hkv) D, the FFN hidden 2F (SwiGLU: gate and up) and activation F, in the model
    dtype, and one row of float32 logits per sequence), ``scores`` (with ``scores``: the prefill's
    full ``H x T x T`` float32 score matrix of one layer, what an attention without a fused kernel,
    the CPU's, materializes), and ``total``."""
    b = DTYPE_BYTES[cfg.dtype]
    T = prompt_len
    per_token = (3 * cfg.d_model + attn_kinds.kind(cfg).hidden_per_token(cfg)
                 + max(k.hidden_per_token(cfg) for k, _ in ffn_kinds.groups(cfg))) * b
    out = {"weights": params(cfg).total * cfg.weight_bits / 8,
           "kv_cache": kv_cache_bytes(cfg, batch, prompt_len + new_tokens),
           "activations": batch * T * per_token + batch * cfg.vocab_size * 4,
           "scores": batch * cfg.n_heads * T * T * 4 if scores else 0}
    out["total"] = sum(out.values())
    return out


def summary(cfg: ModelConfig, batch: int, prompt_len: int, new_tokens: int,
            skew: float = 0.0) -> dict:
    """Flat dict of the analytic figures for one design and workload (the results-row names;
    ``skew``: the workload's ``routing_skew``, an MoE design's touched experts)."""
    p = params(cfg)
    pf, dc = (prefill(cfg, batch, prompt_len, skew),
              decode_mean(cfg, batch, prompt_len, new_tokens, skew))
    row = {
        "params_total": p.total,
        "params_non_embedding": p.non_embedding,
        "params_active": p.active,
        "kv_bytes_per_token": kv_bytes_per_token(cfg),
        "weight_bytes": pf.bytes["weights"],
        # the static cache a workload allocates: every position of every sequence
        "kv_cache_bytes": kv_cache_bytes(cfg, batch, prompt_len + new_tokens),
        "memory_need_bytes": memory_need(cfg, batch, prompt_len, new_tokens)["total"],
    }
    for name, st in (("prefill", pf), ("decode", dc)):
        row[f"{name}_flops"] = st.matmul_flops
        row[f"{name}_elementwise_flops"] = st.elementwise_flops
        row[f"{name}_min_bytes"] = st.min_bytes
        row[f"{name}_kv_read_bytes"] = st.bytes["kv_read"]
        row[f"{name}_arith_intensity"] = st.arithmetic_intensity
        for k, v in st.flops.items():
            row[f"{name}_flops_{k}"] = v
    row["decode_kv_bytes_share"] = (dc.bytes["kv_read"] + dc.bytes["kv_write"]) / dc.min_bytes
    return row


def violations(constraints: dict, analytic: dict) -> dict[str, str]:
    """Constraint bands broken by a design: ``constraints`` maps a figure of ``summary`` (e.g.
    ``params_non_embedding``) to ``{low, high}`` (either may be absent). Returns ``{figure: text}``
    for each broken band, the text naming the figure, its value and the band (a measured study's
    and a predicted one's PRUNED reason)."""
    out = {}
    for key, band in constraints.items():
        v = analytic[key]
        lo, hi = band.get("low"), band.get("high")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            out[key] = (f"{key} = {v:.4g} outside [{f'{lo:.4g}' if lo is not None else '-inf'}, "
                        f"{f'{hi:.4g}' if hi is not None else 'inf'}]")
    return out
