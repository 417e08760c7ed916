"""Each module kind's share of a stage, measured and predicted, and how far apart they are.

The measured side comes from ``profile=modules`` (``sweep.measure.modules``: kernel time per module
kind, ``{stage}_meas_ms_<module>``) and the stage's timed median (``ttft_ms``, ``decode_tpot_ms``);
what the kernels do not cover (launch gaps, host time) is the ``launch_overhead`` share. The
predicted side is the performance model's ``{stage}_pred_ms_<module>`` over its calibrated total.
Shares are fractions of the stage (0..1); errors are in percentage points (predicted - measured).
"""

from __future__ import annotations

import math

from ..common.row import MODULES, TIME, meas_module, pred, pred_module

KERNEL_MODULES = tuple(m for m in MODULES if m != "launch_overhead")


def module_check(row: dict) -> dict:
    """Measured and predicted share of each module kind per stage, where the row has both.

    Args:
        row: a results row with ``{stage}_meas_ms_<module>`` (ms), the stage's measured time
            (``row.TIME``) and ``{stage}_pred_ms_<module>`` / ``{stage}_pred_ms_calibrated``.

    Returns:
        ``{stage}_meas_share_<module>``, ``{stage}_pred_share_<module>`` (0..1, ``launch_overhead``
        included), ``{stage}_share_err_pts_<module>`` (signed points) and
        ``{stage}_share_err_pts_max`` (largest absolute); or ``{stage}_share_reason`` saying why
        not. The measured denominator is the larger of the timed stage and its kernels' sum (the
        profiled run may be slower than the timed one).
    """
    out: dict = {}
    for st, col in TIME.items():
        meas = {m: row.get(meas_module(st, m)) for m in KERNEL_MODULES}
        if any(v is None for v in meas.values()):
            continue  # not profiled per module
        t = row.get(col, math.nan)
        pred_total = row.get(pred(st, "calibrated"), math.nan)
        vals = list(meas.values()) + [t, pred_total]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
            out[f"{st}_share_reason"] = ("no calibrated prediction or no measured module times"
                                         + (f": {row['prediction_reason']}"
                                            if row.get("prediction_reason") else ""))
            continue
        kern = sum(meas.values())
        denom = max(t, kern)
        meas["launch_overhead"] = denom - kern
        worst = 0.0
        for m in MODULES:
            ms = meas[m] / denom
            ps = row.get(pred_module(st, m), 0.0) / pred_total
            out[f"{st}_meas_share_{m}"] = ms
            out[f"{st}_pred_share_{m}"] = ps
            out[f"{st}_share_err_pts_{m}"] = 100 * (ps - ms)
            worst = max(worst, abs(100 * (ps - ms)))
        out[f"{st}_share_err_pts_max"] = worst
    return out
