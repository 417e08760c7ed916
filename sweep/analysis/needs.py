"""What a study's calibration needs: the kernel entries the predictor will look up for its designs.

``needs(items, device_type)`` walks ``sweep.analysis.predict.kernel_list`` for each design and
workload a study may run (``sweep.space.study_designs``) and names the exact GEMM, decode GEMV and
attention shapes it will price; ``missing`` says which of them a calibration table lacks (the
shipped grid and the attention grids a fit needs beside them: ``sweep.caches.grids``). Bounded:
a study never asks for more than ``MOST`` entries of a kind.
"""

from __future__ import annotations

# M of the shipped grid's GEMMs on a GPU: every power of two up to 64 (decode batches), then every
# other one up to 32768 (prefill tokens); the predictor interpolates in log M between them
# the shape columns that identify an entry of each per-shape kind
KEYS = {"gemm": ("M", "N", "K", "dtype"), "gemv": ("M", "N", "K", "prologue", "dtype"),
        # (latent attention's, impl ``mla``: one KV head of the latent, ``D`` its width, ``R``
        # the RoPE key's, ``G`` every query head; ``R`` 0 for the others)
        "decode_attn": ("impl", "kv_dtype", "B", "Hkv", "G", "S", "D", "ring", "R"),
        "prefill_attn": ("impl", "T", "D", "G", "BH", "W", "sink"),
        # the MoE layer's grouped GEMMs (``kernels.moe_gemm``): ``op`` moe_up / moe_down, ``M``
        # the step's tokens, ``E`` experts, ``k`` chosen per token, ``[N, K]`` an expert's weight
        "moe_gemm": ("op", "M", "E", "k", "N", "K", "dtype")}
# a key column's value in rows measured before it existed (a decode-attention entry: no ring, no
# RoPE key of its own; a prefill attention's: full causal SDPA, no window, no sinks)
DEFAULTS = {"ring": 0, "R": 0, "W": 0, "sink": 0}
# a study's needs are bounded: beyond these the lattice is thinned (priced from neighbours)
MOST = {"gemm": 600, "gemv": 400, "decode_attn": 96, "prefill_attn": 64, "moe_gemm": 128}
MOE_BRACKET_MAX = 65536  # tokens: the largest grouped-GEMM entry a prefill's bracket asks for
# the largest GEMM input ``M * max(N, K)`` (elements, 2 bytes each) the micro-benchmark measures
# (``sweep.measure.microbench.gemms``, which keeps its own copy of the bound: its code is the
# ``elementwise`` family's fingerprint); a larger one is priced from its neighbours, not asked for
GEMM_INPUT_BYTES_MOST = {"cuda": 2**31, "cpu": 2**26}


def gemm_measured(M: int, N: int, K: int, device_type: str) -> bool:
    """Whether the micro-benchmark measures a ``gemm`` entry of ``[M, K] x [K, N]`` on a device
    of ``device_type`` (its input ``M * max(N, K) * 2`` bytes within ``GEMM_INPUT_BYTES_MOST``):
    a larger one is never asked for (a study's needs, the shipped grid), and priced from its
    neighbours."""
    return M * max(N, K) * 2 <= GEMM_INPUT_BYTES_MOST[device_type]


def needs(items, device_type: str) -> dict:
    """The per-shape entries the predictor will look up for ``items`` (``(ModelConfig,
    workload, mode)`` triples) on a device of ``device_type``: ``{kind: [key tuples]}`` in
    ``KEYS`` order (a decode-attention key followed by the cache's capacity, how the model
    allocates it), without repeats, bounded by ``MOST`` (evenly thinned beyond it)."""
    from zoo.counts import mean_decode_context

    from .predict import kernel_list

    cuda = device_type == "cuda"
    dtype = "bf16" if cuda else "fp32"
    out: dict[str, set] = {k: set() for k in KEYS}
    for cfg, wl, mode in items:
        if cfg.dtype != dtype:
            continue  # calibrated in the device's model dtype only (others: roofline, noted)
        kernels = cfg.resolved(device_type).kernels  # as the model runs it (torch-only kinds)
        if kernels == "triton" and not cuda:
            continue  # the interpreter's times say nothing of a GPU
        B, T, N = wl["batch"], wl["prompt_len"], wl["new_tokens"]
        for new, ctx in ((T, T), (1, mean_decode_context(T, N))):
            if new == 1 and mode == "compile" and kernels != "triton":
                continue  # Inductor's kernels: not modelled (the Triton ones are ours)
            for k in kernel_list(cfg, B, new, ctx, kernels):
                s = k.shape
                if k.kind in ("gemm", "gemv") and "experts" in s:
                    if "tokens" in s:  # an MoE grouped GEMM of the Triton path: its own entry
                        shape = (s["E"], s["topk"], s["N"], s["K"], s["dtype"])
                        out["moe_gemm"].add((k.op, s["tokens"], *shape))
                        if new > 1 and k.op != "router_route":  # and a prompt routed to its
                            # fewest experts: the bracket of a measured routing's equal rows
                            out["moe_gemm"].add((k.op, moe_bracket(s["tokens"], s["E"],
                                                                   s["topk"]), *shape))
                    continue
                if k.kind == "gemm" and not gemm_measured(s["M"], s["N"], s["K"], device_type):
                    continue  # never measured: asked on every run before (16384- to
                    # 262144-row prefill GEMMs of the LM head and the FFN)
                if k.kind in ("gemm", "gemv"):
                    out[k.kind].add(tuple(s[c] for c in KEYS[k.kind]))
                elif k.kind == "decode_attn":  # + the cache's capacity, as the model's: a
                    # local layer's its window (a ring), a global layer's the workload's length
                    w = s.get("window")
                    out["decode_attn"].add((s["impl"], s["kv_dtype"], s["B"], s["Hkv"], s["G"],
                                            s["S"], s["D"], s.get("ring", 0), s.get("R", 0),
                                            T + N if w is None else min(w, T + N)))
                elif k.kind == "prefill_attn":
                    out["prefill_attn"].add((s["impl"], s["T"], s["D"], s["G"],
                                             s["B"] * s["H"], s.get("W", 0), s.get("sink", 0)))
    return {kind: _thin(sorted(v, key=str), MOST[kind]) for kind, v in out.items()}


def moe_bracket(tokens: int, n_experts: int, k: int) -> int:
    """The tokens whose uniform routing gives each expert the rows of a prompt of ``tokens``
    tokens routed to only ``k`` experts, ``tokens n_experts / k`` (at most ``MOE_BRACKET_MAX``
    or ``tokens``, the larger):
    a trial's measured routing (a random router's prompt reaches 30 of 128 experts) is priced at
    the entries of its rows per expert (``sweep.analysis.price_moe.equal_rows_tokens``), which
    lie between ``tokens`` and this; without an entry there they were extended past the last."""
    return min(tokens * n_experts // k, max(MOE_BRACKET_MAX, tokens))


def _thin(xs: list, most: int) -> list:
    if len(xs) <= most:
        return xs
    step = len(xs) / most
    return [xs[int(i * step)] for i in range(most)]


def with_defaults(sel, kind: str):
    """``sel`` (calibration rows of ``kind``) with each key column newer than the table filled
    with its default (``DEFAULTS``)."""
    for c, v in DEFAULTS.items():
        if c in KEYS[kind]:
            sel = sel.assign(**{c: sel[c].fillna(v) if c in sel else v})
    return sel


def entry_keys(sel, kind: str) -> list:
    """Each row's key of ``sel`` (calibration rows of ``kind``) as the needs spell it (``KEYS``,
    ``DEFAULTS`` filled, ``norm_value``); None for each row of a table without every key
    column."""
    sel = with_defaults(sel, kind)
    cols = list(KEYS[kind])
    if not all(c in sel for c in cols):
        return [None] * len(sel)
    return [tuple(norm_value(v) for v in r) for r in sel[cols].itertuples(index=False)]


def missing(table, want: dict) -> dict:
    """The entries of ``want`` (``needs``) that ``table`` (a calibration, or None) lacks."""
    out = {}
    for kind, keys in want.items():
        have = set()
        if table is not None and len(table) and kind in set(table.kind):
            have = set(entry_keys(table[table.kind == kind], kind)) - {None}
        n = len(KEYS[kind])
        out[kind] = [k for k in keys if tuple(norm_value(v) for v in k[:n]) not in have]
    return out


def norm_value(v):
    """A key value as the needs spell it: a whole float as an int, a numpy scalar as Python's."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v


def merge(a: dict, b: dict) -> dict:
    """The union of two ``needs``."""
    return {k: sorted(set(a.get(k, [])) | set(b.get(k, [])), key=str) for k in KEYS}
