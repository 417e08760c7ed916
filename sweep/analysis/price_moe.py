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


def moe_gemm_price(cal, k) -> tuple[float, str]:
    """``(time s, basis)`` of one launch of grouped GEMM ``k`` priced by ``cal`` (a
    ``pricing.Calibrated``). A memory-bound call (a decode step's) is priced at the entries'
    rate on its own bytes: the experts expected touched under the workload's routing (the
    entries were timed with uniform routing). A transfer to another device scales the time by the
    compute ratio when the call's arithmetic intensity (``k.flops / k.bytes``, FLOP/byte) is at
    or past the source's ridge, else by the memory ratio. Tokens outside the calibrated range:
    the nearest entry's time (below) or extended along the last segment (above), noted; where
    that nearest entry is in the other regime (compute-bound for a memory-bound call, or the
    reverse: its ``2 tokens topk N K`` FLOPs against its bytes), the stand-in's price
    (``proxies``), noted: an H200 predict-only study priced a decode step of 8 tokens from the
    only entry of its shape, a prefill's 8192 tokens, at twice its measured time (2026-11-28)."""
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
    ceil = cal.meta.get("ceilings") or {}
    ridge = cal.scale.get("ridge") or (  # FLOP/byte: the calibrated device's, else a GPU's
        ceil.get(f"gemm_flops_{s['dtype']}", 0.0) / ceil["copy_bytes_s"]
        if ceil.get("copy_bytes_s") else RIDGE)
    memory_bound = k.flops < ridge * k.bytes
    basis = f"moe_gemm {k.op} E={s['E']} k={s['topk']} N={s['N']} K={s['K']}"
    sec, inside = interp_log(s["tokens"], same.M.to_numpy(float), same.time_s.to_numpy(float))
    if not inside:
        near = same.iloc[(same.M - s["tokens"]).abs().argmin()]
        nb = near.get("bytes")
        if nb == nb and nb and (2 * near.M * s["topk"] * s["N"] * s["K"] < ridge * nb) \
                != memory_bound:
            cal._note(f"{basis} at {s['tokens']} tokens: its nearest entry ({near.M:g} tokens) "
                      f"is {'compute' if memory_bound else 'memory'}-bound: priced by the "
                      "stand-in")
            return proxy_price(cal, k)
        cal._note(f"{basis} at {s['tokens']} tokens: outside the calibrated "
                  f"[{int(same.M.min())}, {int(same.M.max())}]")
    if memory_bound and "bytes" in same and same["bytes"].notna().all():
        # the entry's routing touched its own draw of experts; this step touches the number
        # expected under the workload's routing (zoo.routing): the same rate on its bytes
        got, _ = interp_log(s["tokens"], same.M.to_numpy(float), same["bytes"].to_numpy(float))
        sec *= k.bytes / got
    f = cal.scale["memory"] if memory_bound else cal.scale["compute"]
    return sec * f, basis
