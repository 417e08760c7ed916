"""How well the performance model predicted measured studies:
``python -m sweep.report.prediction_check STUDY_DIR [...] [--out check.json]``.

Per stage (TTFT = prefill, TPOT = decode step), over every COMPLETE row of the studies: the
distribution of the signed error of the calibrated prediction against the measurement
(``{stage}_pred_error_pct``) and of the roofline-only prediction on the same rows
(``{stage}_pred_error_pct_roofline``): median and p90 of |error|, mean signed error, count. The
rows themselves (design, measured, both predictions, errors) go to ``--csv``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.derived import STAGE_TIMES
from .tables import design_label, load_study

STAGES = STAGE_TIMES  # stage -> its measured time column


def summary(df: pd.DataFrame) -> dict:
    """``{stage: {kind: {median_abs_pct, p90_abs_pct, mean_signed_pct, n}}}`` over ``df``'s
    COMPLETE rows, for kinds ``calibrated`` and ``roofline``."""
    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    out = {}
    for st in STAGES:
        out[st] = {}
        for kind, col in (("calibrated", f"{st}_pred_error_pct"),
                          ("roofline", f"{st}_pred_error_pct_roofline")):
            e = done[col].astype(float).dropna() if col in done else pd.Series(dtype=float)
            out[st][kind] = {"median_abs_pct": float(np.median(e.abs())) if len(e) else None,
                             "p90_abs_pct": float(np.percentile(e.abs(), 90)) if len(e) else None,
                             "mean_signed_pct": float(e.mean()) if len(e) else None,
                             "n": int(len(e))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("studies", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--csv")
    a = ap.parse_args(argv)
    frames = []
    for s in a.studies:
        meta, df = load_study(s)
        df = df.assign(study=meta["study"], design=[design_label(r) for _, r in df.iterrows()])
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    res = {"studies": [str(s) for s in a.studies], "summary": summary(df),
           "prediction_basis": sorted(df.get("prediction_basis", pd.Series(dtype=str))
                                      .dropna().unique().tolist())}
    print(json.dumps(res["summary"], indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    if a.csv:
        cols = ["study", "design", "batch", "prompt_len", "kernels", "mode", "kv_dtype",
                *[c for st, m in STAGES.items() for c in (m, f"{st}_pred_ms_calibrated",
                                                           f"{st}_pred_ms_roofline",
                                                           f"{st}_pred_error_pct",
                                                           f"{st}_pred_error_pct_roofline")]]
        done = df[df["state"] == "COMPLETE"]
        done[[c for c in cols if c in done]].to_csv(a.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
