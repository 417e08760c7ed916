"""What-if hardware: the designs of measured studies predicted on other chips.

``python -m sweep.cli.whatif results/<study> [...] --hardware h200 mi300x m4_max ...`` predicts every
completed design of each study on each hardware target (``sweep.analysis.targets.predict_on``:
calibrated where the calibration is the target's own, transferred to another NVIDIA GPU,
roofline x the spec's stated efficiencies elsewhere; each row says which in
``prediction_basis``), then per study:

- ``whatif.csv``: design x target: TTFT, TPOT, tokens/s, J/token (where a TDP is stated), fits in
  memory, bound class, basis, and the design's rank on each target;
- ``ranks.csv``: one row per design, its rank on each target by the study's first objective
  (``-`` where it does not fit), e.g. "1st on h100_sxm, 4th on m4_max, does not fit on the phone";
- ``fronts.png`` / ``fronts.html`` / ``fronts.json``: each target's predicted Pareto front in the
  study's objectives, overlaid, with hypervolumes (``sweep.report.fronts``);
- the measured rows beside the prediction on the study's own device (``measured_<objective>``).

The calibration is the study's device's if cached (``results/calibration``), else ``--calibration
FILE.json``; without one every target is roofline-only, said in each row.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from ..analysis.hardware import available, load_spec
from ..analysis.pricing import Calibrated
from ..analysis.targets import config_of, predict_on
from ..common.atomic import write_atomic, write_text
from ..common.env import REPO, slug
from .fronts import compare, plot
from .tables import design_label, load_study


def _calibration(meta: dict, path: str | None) -> Calibrated | None:
    from ..analysis import calibration as cal

    have = cal.load("", where=Path(path)) if path else cal.load(meta.get("device", ""))
    if have is None:
        return None
    m, t = have
    return Calibrated(t, m)


def whatif(meta: dict, df: pd.DataFrame, targets: list[str],
           calibration: Calibrated | None) -> pd.DataFrame:
    """One row per (completed design, target) with ``predict_on``'s figures, the design label,
    the measured objectives (``measured_<name>``) and the design's rank per target."""
    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    wl = meta["workload"]
    objective = meta["objectives"][0]
    rows = []
    for _, r in done.iterrows():
        cfg = config_of(r)
        for t in targets:
            try:
                p = predict_on(cfg, wl, load_spec(t), calibration,
                               mode=meta.get("mode", "cudagraph"))
            except ValueError as e:  # the spec lacks a figure this design needs: said, not guessed
                p = {"target": t, "fits_memory": False, "prediction_basis": "not predicted",
                     "prediction_reason": str(e)}
            p.update(design=design_label(r), study=meta.get("study", ""),
                     **{f"measured_{o}": r.get(o, math.nan) for o in meta["objectives"]},
                     **{o: r[o] for o in meta["objectives"] if o not in p and o in r})
            rows.append(p)
    out = pd.DataFrame(rows)
    asc = meta["directions"][0] == "minimize"
    fit = out[out.fits_memory.astype(bool) & out[objective].notna()]
    out["rank"] = fit.groupby("target")[objective].rank(ascending=asc, method="min")
    return out


def _ordinal(n) -> str:
    if not isinstance(n, (int, float)) or math.isnan(n):
        return "does not fit"
    n = int(n)
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def rank_table(w: pd.DataFrame, targets: list[str]) -> pd.DataFrame:
    """One row per design: its rank on each target (ordinal words, ``does not fit``)."""
    t = w.pivot_table(index="design", columns="target", values="rank", aggfunc="first")
    t = t.reindex(columns=targets)
    words = t.apply(lambda col: col.map(_ordinal))
    return words.reset_index()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("studies", nargs="+", help="study folders (results/<study>)")
    ap.add_argument("--hardware", nargs="+", required=True, metavar="SPEC",
                    help=f"targets, of: {' '.join(n for n in available() if n != 'cpu')}")
    ap.add_argument("--calibration", help="a calibration .json (default: the study device's)")
    ap.add_argument("--out", help="output folder (default results/whatif/<study>)")
    a = ap.parse_args(argv)
    bad = [h for h in a.hardware if h not in available()]
    if bad:
        print(f"error: unknown hardware {', '.join(bad)}; known: {', '.join(available())}",
              file=sys.stderr)
        return 2
    for s in a.studies:
        try:
            meta, df = load_study(s)
        except FileNotFoundError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        cal = _calibration(meta, a.calibration)
        try:
            w = whatif(meta, df, a.hardware, cal)
        except (KeyError, ValueError) as e:
            print(f"error: {s}: {e}", file=sys.stderr)
            return 2
        out = Path(a.out) / slug(Path(s).name) if a.out and len(a.studies) > 1 else \
            Path(a.out) if a.out else REPO / "results" / "whatif" / slug(Path(s).name)
        out.mkdir(parents=True, exist_ok=True)
        ranks = rank_table(w, a.hardware)
        for name, frame in (("whatif.csv", w), ("ranks.csv", ranks)):
            write_atomic(out / name, lambda p, f=frame: f.to_csv(p, index=False))
        objectives, directions = meta["objectives"], meta["directions"]
        per = [(t, {"device": t, "workload": meta["workload"]},
                w[w.target == t].assign(state="COMPLETE").reset_index(drop=True))
               for t in a.hardware]
        per = [(t, m, d[d.fits_memory.astype(bool) & d[objectives].notna().all(axis=1)])
               for t, m, d in per]
        try:
            table, summary = compare([p for p in per if not p[2].empty], objectives, directions)
            plot([p for p in per if not p[2].empty], table, objectives, directions, out)
            table.to_csv(out / "fronts.csv", index=False)
        except ValueError as e:
            summary = {"error": str(e)}
        summary.update(study=str(s), device=meta.get("device"), targets=a.hardware,
                       calibration=(cal.meta.get("device") if cal else None),
                       bases=w.groupby("target").prediction_basis.first().to_dict())
        write_text(out / "fronts.json", json.dumps(summary, indent=1, default=str))
        with pd.option_context("display.width", 200, "display.max_colwidth", 40):
            print(ranks.to_string(index=False))
        print(f"wrote {out}/whatif.csv, ranks.csv, fronts.png, fronts.html, fronts.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
