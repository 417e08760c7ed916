"""Words for columns: axis labels with units, number formats, the spread of a figure.

A plot or a report names a figure in words with its unit (``decode tokens/s``, ``non-embedding
parameters (billions)``), never by its column name alone; ``label`` gives the text and the scale
to divide the column by.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..common.row import COLUMNS, PEAK_MEM, SPREADS
from ..common.row import spread as spread_col

_COUNTS = ((1e9, "billions"), (1e6, "millions"), (1e3, "thousands"), (1, ""))
_BYTES = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "bytes"))


def label(col: str, values=None) -> tuple[str, float]:
    """``(words with unit, divide by)`` for a results column (``sweep.common.row.COLUMNS``);
    unknown columns keep their name. A count of parameters or of bytes takes its unit from the
    data's magnitude (``values``: the column's values; the largest finite one decides: billions
    for a 1B model, thousands for a 0.4M one), without data the size of a real model."""
    c = COLUMNS.get(col)
    if c is None:
        return col.replace("_", " "), 1
    if c.unit in ("parameters", "bytes"):
        scales = _COUNTS if c.unit == "parameters" else _BYTES
        top = _largest(values)
        if top is None:  # no data: as a real design's
            top = 1e9 if c.unit == "parameters" else (2**30 if col == PEAK_MEM else 2**14)
        div, unit = next(((f, u) for f, u in scales if top >= f), scales[-1])
        return (f"{c.words} ({unit})" if unit else c.words), div
    return c.words, c.scale


def _largest(values) -> float | None:
    if values is None:
        return None
    v = np.asarray(pd.to_numeric(pd.Series(list(values)), errors="coerce"), dtype=float)
    v = np.abs(v[np.isfinite(v)])
    return float(v.max()) if v.size and v.max() > 0 else None


def metric_name(col: str) -> str:
    """An objective as optuna-dashboard shows it: ``decode_tok_s (tokens/s)``."""
    unit = COLUMNS[col].unit if col in COLUMNS else ""
    return f"{col} ({unit})" if unit else col


def spread(df: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(below, above)`` error-bar lengths of ``col`` from the measured spread of its repeats
    (min..p90 of the time behind it; a rate's fastest repeat is its highest), or None."""
    time = COLUMNS[col].time if col in COLUMNS else None
    lo_c, hi_c = (spread_col(time, w) for w in SPREADS) if time else (None, None)
    if time is None or not {lo_c, hi_c} <= set(df.columns):
        return None
    rate = col != time  # the time behind a rate: rate = batch x tokens / time
    v = df[col].astype(float).to_numpy()
    lo, hi = df[lo_c].astype(float).to_numpy(), df[hi_c].astype(float).to_numpy()
    if rate:  # rate at p90 time .. rate at min time
        lo, hi = v * df[time].astype(float).to_numpy() / hi, \
            v * df[time].astype(float).to_numpy() / lo
    below, above = np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)
    return np.nan_to_num(below), np.nan_to_num(above)


def sig4(x):
    """``x`` with each float to 4 significant digits, through dicts and lists (a printed summary,
    a fitted figure as precise as it is); anything else as it is."""
    if isinstance(x, dict):
        return {k: sig4(v) for k, v in x.items()}
    if isinstance(x, list):
        return [sig4(v) for v in x]
    return float(f"{x:.4g}") if isinstance(x, float) else x


def fmt(v, digits: int = 4) -> str:
    """A number for a person: ``digits`` significant digits, thousands kept readable."""
    if isinstance(v, (bool, np.bool_)) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, (int, np.integer)):
        return f"{v:,}"
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return ""
        if 1e4 <= abs(v) < 1e7:  # 75,470 tok/s beside 3,151 (not 7.547e+04)
            return f"{v:,.0f}"
        return f"{v:,.{digits}g}" if abs(v) < 1e15 else f"{v:.3e}"
    return str(v)


def si(v: float, unit: str) -> str:
    """``3.35e12, 'B/s'`` -> ``3.35 TB/s``: SI prefixes, three significant digits."""
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
        return ""
    for p, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= f:
            return f"{v / f:.3g} {p}{unit}"
    return f"{v:.3g} {unit}"
