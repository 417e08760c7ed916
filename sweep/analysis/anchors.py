"""A calibration's transfer to another device (``transfer``, ``transfer_here``) and its anchors
on a GPU: a sample of the source table's own entries timed again on the destination, by the
same micro-benchmarks (``sweep.measure.calibration_run``), whose ratios give the transfer's
factors.

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
from pathlib import Path

from .calibration_store import Calibration
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


def measure(device: dict, table, switches, tuning_dir: Path | None = None,
            timeout_s: float = 300.0, log=print) -> list[dict]:
    """The anchors of ``table`` (``sample``) timed on this ``device`` in a child process
    (``sweep.measure.calibration_run.measure_in_child``): rows as the calibration's (``kind``,
    shape columns, ``time_s``).

    Raises:
        RuntimeError: the measurement failed (the child's error tail in the message).
    """
    from ..measure.calibration_run import measure_in_child

    gemm, gemv = sample(table)
    log(f"calibration: timing {len(gemm)} GEMM and {len(gemv)} GEMV entries of the source "
        f"table on {device['name']} (the transfer's anchors)")
    spec = {"device": device["type"], "quick": device["type"] != "cuda",
            "switches": switches.to_dict(),
            "tuning_dir": str(tuning_dir) if tuning_dir else None, "base": [],
            "gemm": gemm, "gemv": gemv, "decode_attn": [], "prefill_attn": []}
    return measure_in_child(spec, "transfer anchors", timeout_s).to_dict("records")


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
    of the source table's own entries timed on the destination: ``sweep.analysis.anchors``),
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


def transfer_here(device: dict, cal: Calibration, ceilings: dict, dtype: str, switches,
                  tuning_dir: Path | None = None):
    """``(Calibrated, anchor rows or None)``: another device's ``Calibration`` priced for this
    ``device`` (``transfer``): by anchors timed here on a GPU (``sweep.analysis.anchors.measure``),
    else by the ratio of its ceilings and this device's measured ``ceilings``."""
    here = measure(device, cal.table, switches, tuning_dir) if device["type"] == "cuda" else None
    return transfer(Calibrated(cal), cal.meta["ceilings"],
                    dict(ceilings, device=device["name"]), dtype, anchors=here), here
