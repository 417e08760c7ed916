"""The price of attention (``pricing.Calibrated``'s ``decode_attn`` and ``prefill_attn``).

Decode: a fit of the calibrated calls' time on KV bytes and scores, corrected by the calibrated
shapes near the call. Prefill (``zoo.attn``'s ``prefill_attn`` kernel): the calibrated achieved
FLOP/s of the kernel the layer launches — causal SDPA for a full layer, the band kernel
(``kernels.prefill_attention``; ``zoo.gqa.blocked`` on the torch path) for a local or sink layer,
keyed by its window ``W`` and ``sink``.
"""

from __future__ import annotations

import math

import numpy as np

from .interp import interp_log

# added to the Shepard weights' sum of the decode-attention correction (``attn_points``): small
# beside the weight of a calibrated shape 2x away (1 / log(2)^2 = 2.08), so between calibrated
# shapes the correction is theirs, and where the last weight fades it fades to no correction
SHEPARD_FLOOR = 0.1


# a ring's decode-attention entries (a local layer's cache of its window) correct only rings, the
# others only the others: a ring entry sits this far (log units) from any other shape
RING_FAR = math.log(16)


def decode_attn_price(cal, s: dict, nbytes: float) -> tuple[float, str]:
    """One decode-attention call (s): ``fixed + a * KV bytes + b * scores`` (``scores = B *
    H * S``, the query-key products the torch path keeps in fp32), least squares with
    relative weights over the calibrated shapes of this implementation and KV dtype (a
    negative coefficient is dropped and the fit redone), times a residual correction: the
    measured / fitted ratios of the calibrated shapes near ``s`` (``attn_points``). The price
    never falls as the GQA group grows at the same KV bytes (more scores, same cache): it is
    the largest over groups ``1 .. G``. Outside the calibrated KV bytes or groups the notes
    say so. A transfer scales the bytes and scores terms. ``nbytes``: the call's KV bytes;
    returns ``(time s, basis)``. Latent attention's kernel (``impl`` mla) without entries
    of its own: priced as the Triton GQA kernel's at its bytes (noted).

    Raises:
        KeyError: fewer than three calibrated entries of this implementation and KV dtype.
    """
    key = (s["impl"], s["kv_dtype"])
    try:
        fit = attn_fit(cal, key)
    except KeyError:
        if key[0] != "mla":
            raise
        # a calibration before the latent kernel's entries: the GQA kernel's fit at the same
        # KV bytes, one KV head (its groups capped at 32)
        cal._note("latent attention's decode kernel (kernels.mla_decode) not "
                  "calibrated: priced as the Triton GQA kernel's entry of its KV bytes")
        like = dict(s, impl="triton", Hkv=1, G=min(int(s["G"]), 32),
                    D=int(s["D"]) + int(s.get("R", 0)))
        t, basis = decode_attn_price(cal, like, nbytes)
        return t, basis + " (as latent attention's)"
    lo, hi, g_lo, g_hi = fit[3:7]
    if not lo <= nbytes <= hi or not g_lo <= s["G"] <= g_hi:
        cal._note(f"decode_attn {'/'.join(key)} at {nbytes:.3g} KV bytes, group {s['G']}: "
                  f"outside the calibrated [{lo:.3g}, {hi:.3g}] bytes, groups "
                  f"[{g_lo}, {g_hi}] (linear fit extended)")
    t, corrected = attn_points(cal, fit, s, nbytes, np.arange(1, int(s["G"]) + 1))
    corrected, t = bool(corrected[t.argmax()]), float(t.max())
    basis = f"decode_attn {'/'.join(key)} fit on KV bytes and scores"
    if corrected:
        basis += ", corrected by the calibrated shapes within 4x"
    return t, basis


def attn_fit(cal, key: tuple) -> tuple:
    """The decode-attention fit of ``(impl, kv_dtype)``: ``(fixed s, s/byte, s/score, min
    bytes, max bytes, min group, max group, log shapes, measured / fitted ratios)``."""
    if key not in cal._fits:
        sel = cal.rows("decode_attn", impl=key[0], kv_dtype=key[1])
        if len(sel) < 3:
            raise KeyError(f"no decode_attn {'/'.join(key)} in the calibration")
        scores = (sel.B * sel.Hkv * sel.G * sel.S).to_numpy(float)
        X = np.stack([np.ones(len(sel)), sel.bytes.to_numpy(float), scores], 1)
        y = sel.time_s.to_numpy(float)
        cols = [0, 1, 2]
        while True:
            coef, *_ = np.linalg.lstsq(X[:, cols] / y[:, None], np.ones(len(y)), rcond=None)
            neg = [c for c, v in zip(cols[1:], coef[1:]) if v < 0]
            if not neg:
                break
            cols.remove(neg[0])
        full = np.zeros(3)
        full[cols] = coef
        fixed = max(full[0], 0.0)
        # each calibrated shape's measured / fitted ratio, to correct the fit near it
        ratio = y / (fixed + X[:, 1] * full[1] + X[:, 2] * full[2])
        ring = sel.ring.fillna(0).to_numpy(float) if "ring" in sel else np.zeros(len(sel))
        shapes = np.hstack([np.log(sel[["B", "Hkv", "G", "S", "D"]].to_numpy(float)),
                            ring[:, None] * RING_FAR])  # ring: 0 in a table before it
        cal._fits[key] = (fixed, full[1], full[2], sel.bytes.min(), sel.bytes.max(),
                           int(sel.G.min()), int(sel.G.max()), shapes, ratio)
    return cal._fits[key]


def attn_points(cal, fit: tuple, s: dict, nbytes: float, groups: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """The fit at shape ``s`` with each GQA group of ``groups`` times its residual
    correction: ``(seconds, corrected)``, one per group. The correction is a Shepard
    (inverse squared distance) mean of the log ratios of the calibrated shapes within 4x in
    every dimension (``d``: the largest log distance), their weights fading linearly from
    ``d = log 2`` to none at ``d = log 4``: the measurement itself at a calibrated shape (the
    price there, the largest over groups ``1 .. G``, is that or more),
    continuous between them, and no correction far from all (``SHEPARD_FLOOR``)."""
    fixed, a, b, _, _, _, _, shapes, ratio = fit
    g = groups.astype(float)
    t = fixed + (a * nbytes + b * s["B"] * s["Hkv"] * g * s["S"]) * cal.scale["memory"]
    q = np.log(np.stack([np.full_like(g, s[k]) if k != "G" else g
                         for k in ("B", "Hkv", "G", "S", "D")], 1))  # [groups, 5]
    q = np.hstack([q, np.full((len(g), 1), s.get("ring", 0) * RING_FAR)])
    far = np.abs(shapes[None] - q[:, None]).max(2)  # [groups, calibrated]
    at = far < 1e-9
    w = np.clip((math.log(4) - far) / math.log(2), 0.0, 1.0) / np.maximum(far, 1e-9) ** 2
    w = np.where(at.any(1, keepdims=True), at.astype(float), w)  # a calibrated shape: its own
    floor = np.where(at.any(1), 0.0, SHEPARD_FLOOR)
    corr = np.exp((w @ np.log(ratio)) / (w.sum(1) + floor))
    return t * corr, w.any(1)



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
