"""A calibration's transfer to another device (``transfer``) and its anchors on a GPU: a sample
of the source table's own entries (``sample``) timed again on the destination, by the same
micro-benchmarks (``sweep.caches.transfer``, which starts that child), whose ratios give the
transfer's factors (``factors``).

Why not the ceilings' ratio: on an H200 the shipped H100 table's compute-bound GEMMs ran at
1.006x their H100 times (16 entries, 0.98-1.03) while two readings of the bf16 GEMM ceiling a
minute apart gave 1.023x and 1.052x; its decode GEMVs ran at 0.75-0.96x (median 0.84) while
the copy ceiling's ratio is 0.71 (``results/reference/transfer_probe_h200.json``). A copy kernel
reaches a larger fraction of the H200's bandwidth than the decode GEMV does, and one burst
reading of a GEMM varies by 3-5% from the next.

    compute factor f = median over GEMM anchors of t_here / t_table
    memory factor  g = least squares on relative error of t_here = fixed + (t_table - fixed) g
                       over GEMV anchors (``fixed``: the table's fitted GEMV latency, kept)

Times in s.
"""

from __future__ import annotations

import statistics

from .pricing import Calibrated

GEMMS, GEMVS = 8, 12  # anchors per kind: a child of ~15 s on an H100


def sample(table, gemms: int = GEMMS, gemvs: int = GEMVS) -> tuple[list, list]:
    """``(gemm, gemv)`` shape lists of a calibration ``table`` to time again: compute-bound
    GEMMs (``M >= 4096``: the largest M of ``gemms`` (N, K) pairs spread over the table) and
    decode GEMVs (M 1 and 8, ``gemvs`` spread over their bytes). ``[M, N, K]`` and
    ``[M, N, K, prologue]``, as ``sweep.measure.calibration_run`` takes them."""
    g = table[(table.kind == "gemm") & (table.M >= 4096)]
    g = g.sort_values(["N", "K", "M"]).groupby(["N", "K"]).tail(1)
    g = g.iloc[:: max(len(g) // gemms, 1)].head(gemms)
    v = table[(table.kind == "gemv") & table.M.isin([1, 8])] if "prologue" in table else \
        table.iloc[:0]
    v = v.sort_values("bytes")
    v = v.iloc[:: max(len(v) // gemvs, 1)].head(gemvs)
    return ([[int(r.M), int(r.N), int(r.K)] for r in g.itertuples()],
            [[int(r.M), int(r.N), int(r.K), str(r.prologue)] for r in v.itertuples()])


def factors(table, rows: list[dict], gemv_fixed: float) -> dict:
    """``{"compute": f, "memory": g, "n_gemm", "n_gemv", "basis"}`` from anchor ``rows`` timed
    here against the same entries of ``table`` (see the module's text); a factor with no anchor
    of its kind is None. ``gemv_fixed``: the table's fitted GEMV latency (s)."""
    keys = {"gemm": ["M", "N", "K"], "gemv": ["M", "N", "K", "prologue"]}
    pairs: dict = {"gemm": [], "gemv": []}
    for r in rows:
        k = keys.get(r.get("kind"))
        if k is None or not r.get("time_s"):
            continue
        t = table[table.kind == r["kind"]]
        for c in k:
            t = t[t[c] == r[c]]
        if len(t):
            pairs[r["kind"]].append((float(t.time_s.median()), float(r["time_s"])))
    f = statistics.median(h / t for t, h in pairs["gemm"]) if pairs["gemm"] else None
    g = None
    if pairs["gemv"]:
        a = [(t - min(gemv_fixed, t)) / h for t, h in pairs["gemv"]]
        b = [(h - min(gemv_fixed, t)) / h for t, h in pairs["gemv"]]
        den = sum(x * x for x in a)
        g = sum(x * y for x, y in zip(a, b)) / den if den > 0 else None
    return {"compute": f, "memory": g, "n_gemm": len(pairs["gemm"]),
            "n_gemv": len(pairs["gemv"]),
            "basis": f"{len(pairs['gemm'])} GEMM and {len(pairs['gemv'])} GEMV entries of the "
                     "source table timed here"}


def transfer(cal: Calibrated, src_ceilings: dict, dst_ceilings: dict, dtype: str = "bf16",
             anchors: list[dict] | None = None) -> Calibrated:
    """A calibration priced for another device: compute-bound terms (GEMMs, prefill attention)
    scaled by a compute factor, memory-bound ones (skinny GEMMs, decode attention, elementwise)
    by a memory factor; fixed costs (launches, fit intercepts, a memory-bound GEMM's latency:
    ``Calibrated._gemm_fixed``) unchanged. The factors come from ``anchors`` where given (rows
    of the source table's own entries timed on the destination: ``sweep.caches.transfer``),
    else from the ratio of the two devices' ceilings (``gemm_flops_<dtype>``, ``copy_bytes_s``:
    measured, or a datasheet target's). The meta's ``transfer`` says which."""
    f = src_ceilings[f"gemm_flops_{dtype}"] / dst_ceilings[f"gemm_flops_{dtype}"]
    g = src_ceilings["copy_bytes_s"] / dst_ceilings["copy_bytes_s"]
    how = {"compute": f, "memory": g, "basis": "ratio of the ceilings"}
    if anchors:
        got = factors(cal.t, anchors, cal._fixed("gemv", dtype) if (cal.t.kind == "gemv").any()
                      else 0.0)
        f, g = got["compute"] or f, got["memory"] or g
        how = dict(got, compute=f, memory=g)
    meta = dict(cal.meta, transferred_to=dst_ceilings.get("device", "another device"),
                transfer=how)
    ridge = src_ceilings[f"gemm_flops_{dtype}"] / src_ceilings["copy_bytes_s"]  # FLOP/byte
    return Calibrated(cal.calibration.with_(meta=meta), {"compute": f, "memory": g, "ridge": ridge})
