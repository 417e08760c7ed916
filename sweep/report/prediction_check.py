"""How well the performance model predicted measured studies:
``python -m sweep.report.prediction_check STUDY_DIR|ROWS.csv [...] [--out check.json]``.

Per stage (TTFT = prefill, TPOT = decode step), over every COMPLETE row of the studies: the
distribution of the signed error of the calibrated prediction against the measurement
(``{stage}_pred_error_pct``) and of the roofline-only prediction on the same rows
(``{stage}_pred_error_pct_roofline``; on every row where none was calibrated): median and p90 of
|error|, mean signed error, count. The rows themselves (design, measured, both predictions,
errors) go to ``--csv``. Rows the model did not price are counted apart with the reason: the
stage's (``{stage}_pred_reason``, e.g. ``mode=compile``), else the design's
(``prediction_reason``: a calibration that cannot price it). Where the rows were profiled per
module (``profile=modules``), ``modules`` gives per stage each module kind's share error (points,
predicted - measured share of the stage) and how many designs have every module within 5 points. A
``.csv`` argument is a ``--csv`` file of an earlier check (its rows join the new ones, e.g.
studies measured in separate device calls). Rows measured while another process used the device
(``contended``) are left out and counted.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd

from ..common.atomic import write_atomic, write_text
from ..common.row import CONTENDED, TIME, error, pred
from ..common.stats import percentile
from .labels import sig4
from .tables import design_label, flag, load_study, named_twice

STAGES = TIME  # stage -> its measured time column


def summary(df: pd.DataFrame) -> dict:
    """``{stage: {kind: {median_abs_pct, p90_abs_pct, mean_signed_pct, n}}}`` over ``df``'s
    COMPLETE rows, for kinds ``calibrated`` and ``roofline``; rows measured while another
    process used the device (``contended``) left out, counted (``"contended_left_out"``, beside
    the stages), as ``compare`` and ``compare_fronts`` judge nothing on them."""
    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    shared = flag(done, CONTENDED)
    n_shared = int(shared.sum())
    done = done[~shared]
    out: dict = {"contended_left_out": n_shared}
    for st in STAGES:
        out[st] = {}
        cal = f"{st}_pred_error_pct"
        priced = done[cal].astype(float).notna() if cal in done else None
        for kind, col in (("calibrated", cal), ("roofline", f"{st}_pred_error_pct_roofline")):
            rows = done[priced] if priced is not None and priced.any() else done  # the same rows
            e = rows[col].astype(float).dropna() if col in rows else pd.Series(dtype=float)
            out[st][kind] = {"median_abs_pct": float(np.median(e.abs())) if len(e) else None,
                             "p90_abs_pct": percentile(e.abs(), 90) if len(e) else None,
                             "mean_signed_pct": float(e.mean()) if len(e) else None,
                             "n": int(len(e))}
        out[st]["not_predicted"] = _not_predicted(done, st)
    return out


def _not_predicted(done: pd.DataFrame, st: str) -> dict:
    """``{reason: rows}`` of the rows with no calibrated error in stage ``st``: the stage's own
    reason (``{st}_pred_reason``, e.g. ``mode=compile``), else the design's
    (``prediction_reason``: a calibration that cannot price it), else ``unknown``."""
    col = f"{st}_pred_error_pct"
    miss = done[done[col].astype(float).isna()] if col in done else done.iloc[:0]
    out: dict = {}
    for _, r in miss.iterrows():
        why = next((r[c] for c in (f"{st}_pred_reason", "prediction_reason")
                    if c in r and isinstance(r[c], str) and r[c]), "unknown")
        out[why] = out.get(why, 0) + 1
    return out


def modules(df: pd.DataFrame, within_pts: float = 5.0) -> dict:
    """``{stage: {module: {median_abs_pts, max_abs_pts}, designs, designs_within}}`` over the
    COMPLETE rows with ``{stage}_share_err_pts_max`` (profiled per module); rows whose graph
    replay could not be matched to the eager run (eager kernel durations, not the graph's) are
    counted under ``excluded``; contended rows left out (``summary``)."""
    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    done = done[~flag(done, CONTENDED)]
    out = {}
    for st in STAGES:
        col = f"{st}_share_err_pts_max"
        if col not in done:
            continue
        rows = done[done[col].notna()]
        # a graph stage whose replay could not be matched to the eager run: eager durations
        note = rows.get(f"{st}_modules_note", pd.Series("", index=rows.index)).fillna("")
        eager = note.astype(str).str.contains("did not match")
        rows = rows[~eager]
        if rows.empty:
            continue
        per = {}
        for c in rows.columns:
            if c.startswith(f"{st}_share_err_pts_") and c != col:
                e = rows[c].astype(float).abs()
                per[c.removeprefix(f"{st}_share_err_pts_")] = {
                    "median_abs_pts": float(e.median()), "max_abs_pts": float(e.max())}
        out[st] = {"modules": per, "designs": int(len(rows)),
                   "designs_within": int((rows[col].astype(float) <= within_pts).sum()),
                   "within_pts": within_pts,
                   "excluded": {"graph replay not matched (eager kernel durations)":
                                int(eager.sum())} if eager.any() else {}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="+", help="study folders (results/<study>/) or the CSV of "
                    "an earlier check's rows")
    ap.add_argument("--out", help="write the summary, per module and per basis, as JSON here")
    ap.add_argument("--csv", help="write the rows checked (COMPLETE, with their errors) here")
    a = ap.parse_args(argv)
    if twice := named_twice(a.studies):
        ap.error(f"studies: {twice} named twice (its rows would count twice)")
    frames = []
    for s in a.studies:
        if str(s).endswith(".csv"):  # the COMPLETE rows of an earlier check
            frames.append(pd.read_csv(s).assign(state="COMPLETE"))
            continue
        meta, df = load_study(s)  # a path that is no study: one line, exit 2 (common.entry)
        df = df.assign(study=meta["study"], design=[design_label(r) for _, r in df.iterrows()])
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    measured = [st for st, m in STAGES.items() if m in df and df[m].notna().any()
                and error(st) in df and df[error(st)].notna().any()]
    if not measured:  # a predict-only study: its figures are the predictions themselves
        raise ValueError(f"{', '.join(map(str, a.studies))}: no measured row with a prediction "
                         "to check (a predict-only study's figures are predictions)")
    res = {"studies": [str(s) for s in a.studies], "summary": summary(df), "modules": modules(df),
           "prediction_basis": sorted(df.get("prediction_basis", pd.Series(dtype=str))
                                      .dropna().unique().tolist())}
    print(json.dumps(sig4(res["summary"]), indent=1))  # --out keeps every digit
    if res["modules"]:  # a study profiled per module (profile=modules)
        print("per module (error of each module's share of the stage's time, in points):")
        print(json.dumps(sig4(res["modules"]), indent=1))
    if n := res["summary"]["contended_left_out"]:
        print(f"{n} row(s) measured while another process used the device (contended): left out; "
              "measure them again alone", file=sys.stderr)
    if a.out:
        write_text(a.out, json.dumps(res, indent=1))
    if a.csv:
        cols = ["study", "design", "batch", "prompt_len", "kernels", "mode", "kv_dtype",
                *[c for st, m in STAGES.items() for c in (m, pred(st, "calibrated"),
                                                           pred(st, "roofline"),
                                                           error(st), error(st, "roofline"),
                                                           f"{st}_pred_reason")],
                *[c for c in df.columns if "_share_" in c or "_meas_ms_" in c
                  or c.endswith("_modules_note") or c in ("prefill_mode", "git_sha", CONTENDED)
                  or c.startswith(("prefill_pred_ms_", "decode_pred_ms_"))]]
        done = df[df["state"] == "COMPLETE"]
        table = done[list(dict.fromkeys(c for c in cols if c in done))]
        write_atomic(a.csv, lambda p: table.to_csv(p, index=False))
    return 0


if __name__ == "__main__":
    from ..common.entry import entry

    sys.exit(entry(main))
