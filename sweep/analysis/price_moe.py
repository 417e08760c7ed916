"""The price of an MoE grouped GEMM (``kernels.moe_gemm``'s ``moe_up`` / ``moe_down``, a
``zoo.launches.Kernel`` whose shape names ``experts``): from the ``moe_gemm`` calibration
entries of the same kernel, experts, top-k and weight shape, interpolated in log tokens
(``sweep.measure.microbench_moe`` measures them as the model launches them); without such
entries, from a like GEMM (``sweep.analysis.proxies``), noted, scaled by what the calibration's
own entries of the kernel took against that stand-in (``stand_in_ratio``).
"""

from __future__ import annotations

import statistics

from zoo.launches import Kernel
from zoo.moe import expected_touched

from .interp import interp_log
from .proxies import proxy_price

RIDGE = 100.0  # FLOP/byte where the calibration names no ceilings
GROUPED = ("moe_up", "moe_down")  # the grouped GEMMs (stand_in_ratio's kernels)


def moe_gemm_price(cal, k) -> tuple[float, str]:
    """``(time s, basis)`` of one launch of grouped GEMM ``k`` priced by ``cal`` (a
    ``pricing.Calibrated``). The entries were timed under uniform routing. A call whose
    experts (``k.shape["touched"]``: measured by the trial, or expected under a
    ``routing_skew``) hold more rows each than the uniform routing's is looked up at
    ``equal_rows_tokens``, the tokens whose uniform routing gives each expert those rows; past
    the last entry, from a compute-bound one, its time times the work (noted). A memory-bound
    call (a decode step's) is then priced at the entries' rate on its own bytes (the touched
    experts'), a compute-bound one times its experts over the entry's. A transfer to another
    device scales the time by the compute ratio when the call's arithmetic intensity
    (``k.flops / k.bytes``, FLOP/byte) is at or past the source's ridge, else by the memory
    ratio. Tokens outside the calibrated range:
    the nearest entry's time (below) or extended along the last segment (above), noted; where
    that nearest entry is in the other regime (compute-bound for a memory-bound call, or the
    reverse: its ``2 tokens topk N K`` FLOPs against its bytes), the stand-in's price
    (``stand_in_price``), noted: an H200 predict-only study priced a decode step of 8 tokens from the
    only entry of its shape, a prefill's 8192 tokens, at twice its measured time (2026-11-28)."""
    s = k.shape
    tokens = (equal_rows_tokens(s["E"], s["topk"], s["tokens"], s.get("touched"))
              if "tokens" in s else None)  # (without: the stand-in's price, below)
    sel = cal.t.iloc[:0]
    if "tokens" in s and not cal.rows("moe_gemm").empty:
        sel = cal.rows("moe_gemm", op=k.op, E=s["E"], k=s["topk"], N=s["N"], K=s["K"],
                       dtype=s["dtype"])
    ridge = _ridge(cal, s["dtype"])
    memory_bound = k.flops < ridge * k.bytes
    if sel.empty:
        return stand_in_price(cal, k, memory_bound)
    same = sel.groupby("M", as_index=False)[["time_s", "bytes"]].median() if "bytes" in sel \
        else sel.groupby("M", as_index=False).time_s.median()
    basis = f"moe_gemm {k.op} E={s['E']} k={s['topk']} N={s['N']} K={s['K']}"
    sec, inside = interp_log(tokens, same.M.to_numpy(float), same.time_s.to_numpy(float))
    top = same.iloc[same.M.argmax()]
    nb = top.get("bytes")
    if (not memory_bound and tokens > top.M >= s["tokens"] and nb == nb and nb
            and 2 * top.M * s["topk"] * s["N"] * s["K"] >= ridge * nb):  # moved past the
        # entries only by the rows per expert (equal_rows_tokens), from a compute-bound entry:
        # past the ridge the time grows as the work does
        sec, inside = float(top.time_s) * tokens / top.M, True
        cal._note(f"{basis} at {tokens:.0f} tokens (the measured routing's rows per expert): the "
                  f"{top.M:g}-token entry's time times the work")
    if not inside:
        near = same.iloc[(same.M - tokens).abs().argmin()]
        nb = near.get("bytes")
        if nb == nb and nb and (2 * near.M * s["topk"] * s["N"] * s["K"] < ridge * nb) \
                != memory_bound:
            cal._note(f"{basis} at {tokens:.0f} tokens: its nearest entry ({near.M:g} tokens) "
                      f"is {'compute' if memory_bound else 'memory'}-bound: priced by the "
                      "stand-in")
            return stand_in_price(cal, k, memory_bound)
        cal._note(f"{basis} at {tokens:.0f} tokens: outside the calibrated "
                  f"[{int(same.M.min())}, {int(same.M.max())}]")
    if memory_bound and "bytes" in same and same["bytes"].notna().all():
        # the entry's routing touched its own draw of experts; this step touches the number
        # expected under the workload's routing (zoo.routing): the same rate on its bytes
        got, _ = interp_log(tokens, same.M.to_numpy(float), same["bytes"].to_numpy(float))
        sec *= k.bytes / got
    elif s.get("touched"):  # the entries' experts, each with the call's rows: the call's number
        sec *= s["touched"] / expected_touched(s["E"], s["topk"], tokens, 0.0)
    f = cal.scale["memory"] if memory_bound else cal.scale["compute"]
    return sec * f, basis


def equal_rows_tokens(E: int, topk: int, tokens: int, touched: float | None) -> float:
    """The tokens whose uniform routing (the calibration entries', ``sweep.measure.microbench_moe``)
    gives each touched expert the rows a call of ``tokens`` tokens over ``touched`` experts gives
    it, ``tokens topk / touched``: ``tokens`` itself where ``touched`` is None or the uniform
    expectation. A grouped GEMM's time is about its touched experts' count times one expert's
    time at its rows, so a routing that reaches fewer experts (a skew; a random router's prompt,
    measured: 30 of 128 at 512 tokens, each with 4x the rows) is priced as the entries at the
    same rows per expert, scaled to its experts (``moe_gemm_price``). Bisection in log tokens
    on ``tokens topk / expected_touched``, which grows with the tokens from 1 (at one token)."""
    uniform = expected_touched(E, topk, tokens, 0.0)
    if not touched or abs(touched - uniform) <= 1e-9 * uniform:
        return float(tokens)
    rows = tokens * topk / touched
    if rows <= 1.0:
        return 1.0
    lo, hi = 1.0, 2.0 * rows * E / topk + 1.0  # rows per expert there >= rows
    for _ in range(64):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if mid * topk / expected_touched(E, topk, mid, 0.0) < rows else (lo, mid)
    return (lo * hi) ** 0.5


def _ridge(cal, dtype: str) -> float:
    """FLOP/byte: the calibrated device's ridge (its measured GEMM ceiling over its copy
    bandwidth), else ``RIDGE``."""
    ceil = cal.meta.get("ceilings") or {}
    return cal.scale.get("ridge") or (ceil.get(f"gemm_flops_{dtype}", 0.0) / ceil["copy_bytes_s"]
                                      if ceil.get("copy_bytes_s") else RIDGE)


def stand_in_price(cal, k, memory_bound: bool) -> tuple[float, str]:
    """``(time s, basis)`` of grouped GEMM ``k`` by the stand-in (``proxies``: one GEMM over the
    touched experts' rows stacked), scaled by ``stand_in_ratio``: what this calibration's own
    ``moe_gemm`` entries of the kernel, in the same regime, took against the stand-in's price of
    them (the H100's and H200's shipped entries: compute-bound 1.3-2.4x, memory-bound
    1.0-1.2x, medians by kernel; 2026-11-28). No such entries: the stand-in's price as it is."""
    t, b = proxy_price(cal, k)
    r, n = stand_in_ratio(cal, k.op, k.shape["dtype"], memory_bound)
    if not n:
        return t, b
    return t * r, f"{b} x{r:.2f} (the median of {n} moe_gemm entries against it)"


def stand_in_ratio(cal, op: str, dtype: str, memory_bound: bool) -> tuple[float, int]:
    """``(ratio, entries)``: the median, over ``cal``'s ``moe_gemm`` entries of kernel ``op``
    (``moe_up``, ``moe_down``) and ``dtype`` in the regime ``memory_bound`` (their FLOPs against
    their bytes at the ridge), of the entry's time over the stand-in's price of its shape (the
    experts it touched, else those expected under uniform routing; ``zoo.moe``'s rows per
    expert); ``(1.0, 0)`` with none, and for a kernel that is no grouped GEMM (``router_route``:
    its stand-in is the two launches it replaces). Cached per calibration; the stand-in's notes
    are not the caller's."""
    key = ("moe_stand_in", op, dtype, memory_bound)
    if key in cal._fits:
        return cal._fits[key]
    rows = cal.rows("moe_gemm", op=op, dtype=dtype) \
        if op in GROUPED and not cal.rows("moe_gemm").empty else cal.t.iloc[:0]
    ridge, wb = _ridge(cal, dtype), 4 if dtype == "fp32" else 2
    saved = list(cal.notes)
    ratios = []
    for e in rows.itertuples():
        M, E, topk, N, K = int(e.M), int(e.E), int(e.k), int(e.N), int(e.K)
        touched = getattr(e, "touched", float("nan"))
        touched = touched if touched == touched and touched else expected_touched(E, topk, M, 0.0)
        n, m = max(1, round(touched)), max(1, round(M * topk / touched))
        flops, nbytes = 2 * m * n * N * K, n * N * K * wb + m * n * (N + K) * wb
        if (flops < ridge * nbytes) != memory_bound:
            continue
        shape = {"M": m, "N": N, "K": K, "dtype": dtype, "experts": n, "tokens": M, "E": E,
                 "topk": topk}
        price, _ = proxy_price(cal, Kernel("ffn", "gemm", op, flops, nbytes, shape, 1, 1))
        f = cal.scale["memory" if memory_bound else "compute"]
        if price > 0:
            ratios.append(e.time_s * f / price)
    cal.notes[:] = saved
    cal._fits[key] = (statistics.median(ratios), len(ratios)) if ratios else (1.0, 0)
    return cal._fits[key]
