"""Interpolation of calibrated times between measured sizes, in log-log (a GEMM's time over M,
a bandwidth kernel's over bytes: ``sweep.analysis.pricing``)."""

from __future__ import annotations

import math

import numpy as np


def interp_log(x: float, xs: np.ndarray, ys: np.ndarray) -> tuple[float, bool]:
    """Piecewise-linear interpolation of log y over log x; ``(y, inside)``: outside the range the
    nearest end is extended along the last segment's slope and ``inside`` is False."""
    lx, lxs, lys = math.log(x), np.log(xs), np.log(ys)
    if len(xs) == 1:
        return float(ys[0]), x == xs[0]
    inside = bool(lxs[0] <= lx <= lxs[-1])
    if lx < lxs[0]:
        return float(ys[0]), False  # below the smallest M: a GEMM does not get faster
    if lx > lxs[-1]:
        slope = (lys[-1] - lys[-2]) / (lxs[-1] - lxs[-2])
        return float(math.exp(lys[-1] + slope * (lx - lxs[-1]))), False
    return float(math.exp(np.interp(lx, lxs, lys))), inside
