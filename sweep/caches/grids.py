"""The grids a calibration measures beyond a study's own shapes: the shipped grid over designs
(``grid_needs``: every GEMM ``(N, K)`` at every ``M_GRID`` M, every decode GEMV at ``M`` 1 .. 16,
an MoE design's grouped GEMMs at every ``MOE_DECODE_TOKENS`` decode step, the prefill-attention
grid) and the decode-attention shapes a fit of each ``(impl, kv_dtype)``
needs (``attn_grid``), from the micro-benchmarks' own grids (``sweep.measure.microbench``)."""

from __future__ import annotations

from ..analysis.needs import DEFAULTS, KEYS, gemm_measured, norm_value, with_defaults
from ..measure.microbench import decode_attention_grid, prefill_attention_grid
from ..measure.microbench_mla import mla_grid

M_GRID = [1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096, 16384, 32768]
GEMV_M_GRID = [1, 2, 4, 8, 16]
# an MoE decode step's tokens (its batch): the experts it touches grow with them, so a batch
# between two entries far apart is priced off (Qwen3-30B-A3B at batch 8 between 1 and 512
# tokens: +13% on the H100, predict-only)
MOE_DECODE_TOKENS = [1, 2, 4, 8, 16, 32, 64]
OFF_GRID = [(1000, 1000), (1536, 2880), (2112, 1344), (5000, 3000), (4160, 4160)]  # not x64


def grid_needs(items, device_type: str) -> dict:
    """The shipped grid over ``items``' designs: every GEMM ``(N, K)`` (and ``OFF_GRID``) at
    every ``M_GRID`` M (powers of two up to 512 on the CPU) the micro-benchmark measures
    (``needs.gemm_measured``: 22 of the shipped designs' LM-head and FFN keys at 16384 and
    32768 rows are not, and were asked on every ``sweep.cli.calibrate`` run), every decode GEMV
    at ``M`` 1 .. 16, an MoE design's grouped GEMMs and router as a decode step of each ``MOE_DECODE_TOKENS``
    tokens launches them (on a GPU), the prefill attention grid."""
    from ..analysis.predict import kernel_list

    cuda = device_type == "cuda"
    dtype = "bf16" if cuda else "fp32"
    m_grid = M_GRID if cuda else [1, 2, 4, 16, 64, 256]  # the CPU's tiny designs: a few
    nk, nkp, moe = set(OFF_GRID) if cuda else set(), set(), set()
    for cfg, _, _ in items:
        for k in kernel_list(cfg, 1, 2, 2, "torch"):
            if k.kind == "gemm":
                nk.add((k.shape["N"], k.shape["K"]))
        if cuda:
            for k in kernel_list(cfg, 1, 1, 2, "triton"):
                if k.kind == "gemv":
                    nkp.add((k.shape["N"], k.shape["K"], k.shape["prologue"]))
            for B in MOE_DECODE_TOKENS if cfg.moe else ():  # the launches of a step of B tokens
                for k in kernel_list(cfg, B, 1, 2, "triton"):
                    s = k.shape
                    if "experts" in s and "tokens" in s:  # a grouped GEMM of the Triton path
                        moe.add((k.op, s["tokens"], s["E"], s["topk"], s["N"], s["K"],
                                 s["dtype"]))
    return {"gemm": [(M, N, K, dtype) for N, K in sorted(nk) for M in m_grid
                     if gemm_measured(M, N, K, device_type)],  # (the rest: never measured)
            "gemv": [(M, N, K, p, dtype) for N, K, p in sorted(nkp) for M in GEMV_M_GRID],
            "moe_gemm": sorted(moe),
            "decode_attn": [],
            "prefill_attn": [tuple(s[c] for c in KEYS["prefill_attn"])
                             for s in prefill_attention_grid(cuda, not cuda)]}


def attn_grid(table, todo: dict, device_type: str, quick: bool, full: bool) -> list:
    """The decode-attention shapes each ``(impl, kv_dtype)`` the study prices needs for its fit
    (``sweep.measure.microbench.decode_attention_grid``): the full grid with ``full``, else the
    reduced one where the table holds fewer than 6 entries of it; those it holds left out.
    (``full``: the 16-bit caches' full grid, the quantized ones' reduced.)"""

    cuda = device_type == "cuda"
    wanted = {(k[0], k[1]) for k in todo.get("decode_attn", [])}
    if table is not None and len(table) and "decode_attn" in set(table.kind):
        d = with_defaults(table[table.kind == "decode_attn"], "decode_attn")
        counts = d.groupby(["impl", "kv_dtype"]).size().to_dict()
    else:
        counts = {}
    if full:
        wanted |= {(i, k) for i, k in (("torch", "bf16"), ("triton", "bf16"), ("triton", "int8"),
                                       ("triton", "fp8_e4m3"))} if cuda else {("torch", "fp32")}
    sparse = {w for w in wanted if counts.get(w, 0) < 6 or full}
    if not sparse:
        return []
    # the full grid for the 16-bit caches; the quantized ones (kv_quant studies) reduced: their
    # compiles are many, and a study calibrates its own shapes exactly
    wide = {w for w in sparse if w[1] not in ("int8", "fp8_e4m3")} if full else set()
    grid = (decode_attention_grid(cuda, quick, kv_dtypes=wide, full=True) if wide else []) + \
        (decode_attention_grid(cuda, quick, kv_dtypes=sparse - wide) if sparse - wide else [])
    if cuda and ("mla", "bf16") in sparse:  # latent attention's kernel (its own grid)
        grid += mla_grid(quick)
    have = set()
    if counts:
        have = {tuple(norm_value(v) for v in r) for r in
                d[list(KEYS["decode_attn"])].itertuples(index=False)}
    todo_keys = {tuple(k[:len(KEYS["decode_attn"])]) for k in todo.get("decode_attn", [])}
    return [g for g in grid if tuple(g.get(c, DEFAULTS.get(c)) for c in KEYS["decode_attn"])
            not in have | todo_keys]


