"""The price of an MoE grouped GEMM (``kernels.moe_gemm``'s ``moe_up`` / ``moe_down``, a
``zoo.launches.Kernel`` whose shape names ``experts``): from the ``moe_gemm`` calibration
entries of the same kernel, experts, top-k and weight shape, interpolated in log tokens
(``sweep.measure.microbench_moe`` measures them as the model launches them); without such
entries, from a like GEMM (``sweep.analysis.proxies``), noted.
"""

from __future__ import annotations

from .interp import interp_log
from .proxies import proxy_price

RIDGE = 100.0  # FLOP/byte where the calibration names no ceilings
# tokens farther than this factor from every entry of the shape: another regime (a decode step's
# few rows stream the touched experts' weights, a prefill's thousands are compute-bound), not
# priced from those entries but by the stand-in (an H200 predict-only study priced a decode of 8
# tokens from the only entry, 8192 tokens', at twice its measured step; 2026-11-28)
FAR = 4.0


def moe_gemm_price(cal, k) -> tuple[float, str]:
    """``(time s, basis)`` of one launch of grouped GEMM ``k`` priced by ``cal`` (a
    ``pricing.Calibrated``). A memory-bound call (a decode step's) is priced at the entries'
    rate on its own bytes: the experts expected touched under the workload's routing (the
    entries were timed with uniform routing). A transfer to another device scales the time by the
    compute ratio
    when the call's arithmetic intensity (``k.flops / k.bytes``, FLOP/byte) is at or past the
    source's ridge, else by the memory ratio. Tokens outside the calibrated range: the nearest
    entry's time (below) or extended along the last segment (above), noted; farther than
    ``FAR`` times from every entry, the stand-in's price (``proxies``), noted."""
    s = k.shape
    t = cal.t
    sel = t.iloc[:0]
    if "tokens" in s and "moe_gemm" in set(t.kind):
        sel = t[(t.kind == "moe_gemm") & (t.op == k.op) & (t.E == s["E"]) & (t.k == s["topk"])
                & (t.N == s["N"]) & (t.K == s["K"]) & (t.dtype == s["dtype"])]
    if sel.empty:
        return proxy_price(cal, k)
    same = sel.groupby("M", as_index=False)[["time_s", "bytes"]].median() if "bytes" in sel \
        else sel.groupby("M", as_index=False).time_s.median()
    lo, hi = float(same.M.min()), float(same.M.max())
    if not lo / FAR <= s["tokens"] <= hi * FAR:
        cal._note(f"moe_gemm {k.op} E={s['E']} k={s['topk']} N={s['N']} K={s['K']} at "
                  f"{s['tokens']} tokens: no entry within {FAR:g}x (calibrated [{lo:g}, {hi:g}]): "
                  "priced by the stand-in")
        return proxy_price(cal, k)
    sec, inside = interp_log(s["tokens"], same.M.to_numpy(float), same.time_s.to_numpy(float))
    basis = f"moe_gemm {k.op} E={s['E']} k={s['topk']} N={s['N']} K={s['K']}"
    if not inside:
        cal._note(f"{basis} at {s['tokens']} tokens: outside the calibrated "
                  f"[{int(same.M.min())}, {int(same.M.max())}]")
    ceil = cal.meta.get("ceilings") or {}
    ridge = cal.scale.get("ridge") or (  # FLOP/byte: the calibrated device's, else a GPU's
        ceil.get(f"gemm_flops_{s['dtype']}", 0.0) / ceil["copy_bytes_s"]
        if ceil.get("copy_bytes_s") else RIDGE)
    memory_bound = k.flops < ridge * k.bytes
    if memory_bound and "bytes" in same and same["bytes"].notna().all():
        # the entry's routing touched its own draw of experts; this step touches the number
        # expected under the workload's routing (zoo.routing): the same rate on its bytes
        got, _ = interp_log(s["tokens"], same.M.to_numpy(float), same["bytes"].to_numpy(float))
        sec *= k.bytes / got
    f = cal.scale["memory"] if memory_bound else cal.scale["compute"]
    return sec * f, basis
