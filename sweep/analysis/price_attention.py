"""The price of a causal prefill attention (``zoo.attn``'s ``prefill_attn`` kernel): from the
calibrated achieved FLOP/s of the kernel the layer launches — causal SDPA for a full layer, the
band kernel (``kernels.prefill_attention``; ``zoo.gqa.blocked`` on the torch path) for a local or
sink layer, keyed by its window ``W`` and ``sink``.
"""

from __future__ import annotations

import math

from .interp import interp_log


def prefill_attn_price(cal, s: dict, flops: float) -> tuple[float, str]:
    """``(time s, basis)`` of a causal prefill attention of ``flops`` (counted as the calibration
    counts them, ``2 H D T min(T, W)``; ``W = T`` for a full layer, causal in both) priced by
    ``cal`` (a ``pricing.Calibrated``): the achieved FLOP/s of the calibrated entries of the same
    implementation and kind (full, or a band of the nearest window, with sinks or not: a kind not
    calibrated is priced as full causal SDPA, noted), nearest head_dim and GQA group (among the
    groups measured at this ``T`` when any is), interpolated in log T. The efficiency is a median
    over the group's head counts: a group measured at this T with few heads only still prices it
    slow (the head count is not matched; matching it moved the records' other rows +4-5%, so it
    was left). ``s``: ``impl``, ``T``, ``D``, ``G``, ``B``, ``H``, ``W`` and ``sink`` (0: none).

    Raises:
        KeyError: no prefill-attention entry in the calibration.
    """
    p = cal.rows("prefill_attn")
    if "impl" in p and p.impl.notna().any():
        p = p[p.impl == s.get("impl", "torch")] if (p.impl == s.get("impl")).any() else p
    if p.empty:
        raise KeyError("no prefill attention in the calibration")
    W, sink = s.get("W", 0), s.get("sink", 0)
    pw = p.assign(W=p.W.fillna(0) if "W" in p else 0, sink=p.sink.fillna(0) if "sink" in p else 0)
    band = pw[((pw.W > 0) == (W > 0)) & (pw.sink == sink)]
    kind = ""
    if W or sink:
        if band.empty:
            cal._note(f"prefill attention over a window of {W} / sinks {sink} not calibrated: "
                      "priced as causal SDPA")
            band = pw[(pw.W == 0) & (pw.sink == 0)]
        else:
            w = min(band.W.unique(), key=lambda v: abs(math.log(max(v, 1)) - math.log(max(W, 1))))
            band = band[band.W == w]
            kind = f" W={int(w)}" * bool(W) + " sinks" * bool(sink)
    p = band if not band.empty else p
    p = p[p.D == min(p.D.unique(), key=lambda v: abs(v - s["D"]))]
    if "G" in p and p.G.notna().all():
        # the nearest group among those measured at this T when any is: the group changes
        # only the K/V bytes of a FLOP-bound kernel, the length (and head count) its
        # efficiency: a G=2 entry of 4 heads at T=256 priced a 32-head T=512 prefill 7x slow
        # (offline repricing of predict_h100_v3 and predict_h200_from_h100_v3: TTFT +48%, +50%)
        at_t = p[p["T"] == s["T"]] if "T" in p else p.iloc[:0]
        g = min((at_t if not at_t.empty else p).G.unique(),
                key=lambda v: abs(math.log(v) - math.log(s.get("G", 1))))
        p = p[p.G == g]
    bh = s.get("B", 1) * s.get("H", 0)
    exact = (p["T"] == s["T"]) & (p["BH"] == bh) if "BH" in p else None
    if exact is not None and exact.any():  # this very shape, measured
        p = p[exact]
    d = p.assign(eff=p.flops / p.time_s).groupby("T", as_index=False).eff.median()
    eff = d.eff.to_numpy(float)  # FLOP/s at each T (median over head counts)
    e, inside = interp_log(s["T"], d["T"].to_numpy(float), eff)
    if not inside:
        cal._note(f"prefill attention T={s['T']} outside the calibrated "
                  f"[{int(d['T'].min())}, {int(d['T'].max())}]")
    extra = f" G={int(p.G.iloc[0])}" if "G" in p and p.G.notna().all() else ""
    return flops / e * cal.scale["compute"], f"prefill_attn D={int(p.D.iloc[0])}{extra}{kind}"
