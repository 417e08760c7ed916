"""The price of an MoE grouped GEMM (``kernels.moe_gemm``'s ``moe_up`` / ``moe_down``, a
``zoo.launches.Kernel`` whose shape names ``experts``): from the ``moe_gemm`` calibration
entries of the same kernel, experts, top-k and weight shape, interpolated in log tokens
(``sweep.measure.microbench_moe`` measures them as the model launches them); without such
entries, from a like GEMM (``sweep.analysis.proxies``), noted.
"""

from __future__ import annotations

from .interp import interp_log
from .proxies import proxy_price


def moe_gemm_price(cal, k) -> tuple[float, str]:
    """``(time s, basis)`` of one launch of grouped GEMM ``k`` priced by ``cal`` (a
    ``pricing.Calibrated``). A transfer to another device scales the time by the compute ratio
    when the call's arithmetic intensity (``k.flops / k.bytes``, FLOP/byte) is at or past the
    source's ridge, else by the memory ratio. Tokens outside the calibrated range: the nearest
    entry's time (below) or extended along the last segment (above), noted."""
    s = k.shape
    t = cal.t
    sel = t.iloc[:0]
    if "tokens" in s and "moe_gemm" in set(t.kind):
        sel = t[(t.kind == "moe_gemm") & (t.op == k.op) & (t.E == s["E"]) & (t.k == s["topk"])
                & (t.N == s["N"]) & (t.K == s["K"]) & (t.dtype == s["dtype"])]
    if sel.empty:
        return proxy_price(cal, k)
    same = sel.groupby("M", as_index=False).time_s.median()
    sec, inside = interp_log(s["tokens"], same.M.to_numpy(float), same.time_s.to_numpy(float))
    basis = f"moe_gemm {k.op} E={s['E']} k={s['topk']} N={s['N']} K={s['K']}"
    if not inside:
        cal._note(f"{basis} at {s['tokens']} tokens: outside the calibrated "
                  f"[{int(same.M.min())}, {int(same.M.max())}]")
    f = cal.scale["compute"] if k.flops >= cal.scale.get("ridge", 0.0) * k.bytes else \
        cal.scale["memory"]
    return sec * f, basis
