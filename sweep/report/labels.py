"""Words for columns: axis labels with units, number formats, the spread of a figure.

A plot or a report names a figure in words with its unit (``decode tokens/s``, ``non-embedding
parameters (billions)``), never by its column name alone; ``label`` gives the text and the scale
to divide the column by.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

# column -> (words with unit, divide by)
LABELS = {
    "decode_tok_s": ("decode tokens/s", 1),
    "prefill_tok_s": ("prefill tokens/s", 1),
    "ttft_ms": ("time to first token, TTFT (ms)", 1),
    "decode_tpot_ms": ("time per output token, TPOT (ms)", 1),
    "params_non_embedding": ("non-embedding parameters (billions)", 1e9),
    "params_total": ("parameters (billions)", 1e9),
    "kv_bytes_per_token": ("KV-cache bytes per token (KiB)", 1024),
    "peak_mem_bytes": ("peak GPU memory (GiB)", 2**30),
    "decode_j_per_token": ("decode energy (J/token)", 1),
    "prefill_j_per_token": ("prefill energy (J/token)", 1),
    "prefill_mfu_vs_measured": ("prefill MFU (of the measured GEMM ceiling)", 1),
    "prefill_mfu_vs_datasheet": ("prefill MFU (of the datasheet peak)", 1),
    "decode_mbu_vs_measured": ("decode MBU (of the measured copy bandwidth)", 1),
    "decode_mbu_vs_datasheet": ("decode MBU (of the datasheet bandwidth)", 1),
}
# objective -> its unit, for optuna-dashboard's metric names
UNITS = {"decode_tok_s": "tokens/s", "prefill_tok_s": "tokens/s", "ttft_ms": "ms",
         "decode_tpot_ms": "ms", "peak_mem_bytes": "bytes", "kv_bytes_per_token": "bytes",
         "params_non_embedding": "parameters", "params_total": "parameters",
         "decode_j_per_token": "J/token", "prefill_j_per_token": "J/token"}


def label(col: str) -> tuple[str, float]:
    """``(words with unit, divide by)`` for a results column; unknown columns keep their name."""
    return LABELS.get(col, (col.replace("_", " "), 1))


def metric_name(col: str) -> str:
    """An objective as optuna-dashboard shows it: ``decode_tok_s (tokens/s)``."""
    unit = UNITS.get(col) or ("fraction of peak" if "_mfu_" in col or "_mbu_" in col else "")
    return f"{col} ({unit})" if unit else col


# the time behind a rate: rate = batch * tokens / time, so its spread is the time's, inverted
_SPREAD = {"ttft_ms": ("ttft_ms_min", "ttft_ms_p90", False),
           "decode_tpot_ms": ("decode_tpot_ms_min", "decode_tpot_ms_p90", False),
           "prefill_tok_s": ("ttft_ms_min", "ttft_ms_p90", True),
           "decode_tok_s": ("decode_tpot_ms_min", "decode_tpot_ms_p90", True)}


def spread(df: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(below, above)`` error-bar lengths of ``col`` from the measured spread of its repeats
    (min..p90 of the time behind it; a rate's fastest repeat is its highest), or None."""
    if col not in _SPREAD or not {_SPREAD[col][0], _SPREAD[col][1]} <= set(df.columns):
        return None
    lo_c, hi_c, rate = _SPREAD[col]
    v = df[col].astype(float).to_numpy()
    lo, hi = df[lo_c].astype(float).to_numpy(), df[hi_c].astype(float).to_numpy()
    if rate:  # rate at p90 time .. rate at min time
        lo, hi = v * df[STAGE_TIME[col]].astype(float).to_numpy() / hi, \
            v * df[STAGE_TIME[col]].astype(float).to_numpy() / lo
    below, above = np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)
    return np.nan_to_num(below), np.nan_to_num(above)


STAGE_TIME = {"prefill_tok_s": "ttft_ms", "decode_tok_s": "decode_tpot_ms"}


def fmt(v, digits: int = 4) -> str:
    """A number for a person: ``digits`` significant digits, thousands kept readable."""
    if isinstance(v, (bool, np.bool_)) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, (int, np.integer)):
        return f"{v:,}"
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return ""
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
