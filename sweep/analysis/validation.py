"""The performance model judged on a validation set: the error table, per category, with the
interval's coverage (``python -m sweep.cli.validate`` measures and prices the pairs).

Each row is one (design, workload) pair: its measured TTFT and TPOT, the calibrated prediction,
its interval, the roofline-only prediction, the signed errors and whether the measurement fell
inside the interval. ``summary`` gives, per stage, the median, p90 and largest absolute error of
the calibrated and of the roofline prediction, the interval's coverage and width, over all rows
and per category; ``passes`` holds it against thresholds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..common.row import CONTENDED, STAGES, TIME, error, pred
from ..common.stats import percentile

# the targets of the held-out issue: stage -> (median, p90) |error| in %
TARGETS = {"decode": (3.0, 8.0), "prefill": (5.0, 10.0)}
COVERAGE, HALF_WIDTH = 0.80, 15.0  # share of rows inside their interval; interval +-% for most


def add_checks(df: pd.DataFrame) -> pd.DataFrame:
    """``{stage}_in_interval`` and ``{stage}_half_width_pct`` columns beside the predictions."""
    df = df.copy()
    for st in STAGES:
        m, lo, hi, p = (df.get(c) for c in (TIME[st], pred(st, "lo"), pred(st, "hi"),
                                              pred(st, "calibrated")))
        if m is None or lo is None:
            continue
        df[f"{st}_in_interval"] = (m >= lo) & (m <= hi)
        df[f"{st}_half_width_pct"] = 100 * (hi - lo) / 2 / p
    return df


def abs_stats(x: pd.Series) -> dict:
    """``{n, median, p90, max}`` of the absolute values of ``x`` (signed errors, %), NaN left
    out; ``{n: 0}`` when none."""
    a = x.dropna().abs().to_numpy(float)
    if not a.size:
        return {"n": 0}
    return {"n": int(a.size), "median": float(np.median(a)), "p90": percentile(a, 90),
            "max": float(a.max())}


def summary(df: pd.DataFrame) -> dict:
    """Per stage: the calibrated and the roofline errors' |median|, p90, max; the interval's
    coverage and the share of rows with a half-width <= ``HALF_WIDTH``; then the same per
    category (``cat``: a list per row); ``contended``: the pairs measured while another process
    used the device (kept in the figures, said beside them: ``markdown``)."""
    df = add_checks(df)

    def block(d):
        out = {}
        for st in STAGES:
            if error(st) not in d:
                continue
            o = {"calibrated": abs_stats(d[error(st)]),
                 "roofline": abs_stats(d.get(error(st, "roofline"), pd.Series(dtype=float)))}
            if f"{st}_in_interval" in d:
                inside = d[f"{st}_in_interval"][d[error(st)].notna()]
                width = d[f"{st}_half_width_pct"][d[error(st)].notna()]
                o["in_interval"] = float(inside.mean()) if len(inside) else math.nan
                o["narrow"] = float((width <= HALF_WIDTH).mean()) if len(width) else math.nan
            out[st] = o
        return out

    shared = df[CONTENDED].fillna(False).astype(bool) if CONTENDED in df else df.index.isna()
    res = {"all": block(df), "rows": int(len(df)), "contended": int(shared.sum())}
    if "cat" in df:
        cats = sorted({c for cs in df["cat"] for c in (cs or [])})
        res["categories"] = {c: block(df[df["cat"].map(lambda cs, c=c: c in (cs or []))])
                             for c in cats}
    return res


def passes(s: dict, targets: dict | None = None) -> dict:
    """``{check: bool}`` of a summary against ``targets`` (default ``TARGETS``), the coverage
    and the width."""
    targets = targets or TARGETS
    out = {}
    for st, (med, p90) in targets.items():
        a = s["all"].get(st, {})
        c = a.get("calibrated", {})
        if not c.get("n"):
            continue
        # plain bools (a numpy bool is not JSON)
        out[f"{st}_median<={med}%"] = bool(c["median"] <= med)
        out[f"{st}_p90<={p90}%"] = bool(c["p90"] <= p90)
        if "in_interval" in a:
            out[f"{st}_in_interval>={COVERAGE:.0%}"] = bool(a["in_interval"] >= COVERAGE)
            out[f"{st}_half_width<={HALF_WIDTH:.0f}%"] = bool(a["narrow"] >= COVERAGE)
    return out


def markdown(df: pd.DataFrame, s: dict, title: str) -> str:
    """The table and the summary as Markdown (``<set>.md``)."""
    def f(v, d=1):
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"

    lines = [f"# {title}", ""]
    if s.get("contended"):  # (the console said so; the table had not)
        lines += [f"{s['contended']} of {s['rows']} pairs were measured while another process "
                  "used the device (`contended`, in the table below): their errors hold that "
                  "load as well as the model's; measure them again alone.", ""]
    lines += ["| stage | kind | median | p90 | max | n | in interval | half-width <= 15% |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for st, o in s["all"].items():
        for kind in ("calibrated", "roofline"):
            c = o.get(kind, {})
            lines.append(f"| {st} | {kind} | {f(c.get('median'))}% | {f(c.get('p90'))}% | "
                         f"{f(c.get('max'))}% | {c.get('n', 0)} | "
                         + (f"{f(100 * o.get('in_interval', math.nan), 0)}% | "
                            f"{f(100 * o.get('narrow', math.nan), 0)}% |" if kind == "calibrated"
                            else " | |"))
    if s.get("categories"):
        lines += ["", "| category | TPOT median / p90 | TTFT median / p90 | n |",
                  "| --- | --- | --- | ---: |"]
        for cat, o in s["categories"].items():
            d, p = o.get("decode", {}).get("calibrated", {}), o.get("prefill", {}).get(
                "calibrated", {})
            lines.append(f"| {cat} | {f(d.get('median'))}% / {f(d.get('p90'))}% | "
                         f"{f(p.get('median'))}% / {f(p.get('p90'))}% | {d.get('n', 0)} |")
    cols = [c for c in ("name", TIME["decode"], pred("decode", "calibrated"), pred("decode", "lo"),
                        pred("decode", "hi"), error("decode"), TIME["prefill"],
                        pred("prefill", "calibrated"), error("prefill"), "prediction_confidence",
                        CONTENDED)
            if c in df]
    lines += ["", df[cols].to_markdown(index=False, floatfmt=".4g") if _has_tabulate() else
              df[cols].to_string(index=False)]
    return "\n".join(lines) + "\n"


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True
