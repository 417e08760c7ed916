"""What-if hardware: the designs of measured studies predicted on other chips, as tables and fronts.

``python -m sweep.cli.whatif results/<study> [...] --hardware h200 mi300x m4_max ...`` has every
completed design of each study predicted on each hardware target (``sweep.analysis.study_targets``:
calibrated where the calibration is the target's own, transferred to another NVIDIA GPU,
roofline x the spec's stated efficiencies elsewhere; each row says which in
``prediction_basis``) and writes, per study:

- ``whatif.csv``: design x target: TTFT, TPOT, tokens/s, J/token (where a TDP is stated), fits in
  memory, bound class, basis, and the design's rank on each target;
- ``ranks.csv``: one row per design, its rank on each target by the study's first objective
  (``-`` where it does not fit), e.g. "1st on h100_sxm, 4th on m4_max, does not fit on the phone";
- ``fronts.png`` / ``fronts.html`` / ``fronts.json``: each target's predicted Pareto front in the
  study's objectives, overlaid, with hypervolumes (``sweep.report.fronts``);
- the measured rows beside the prediction on the study's own device (``measured_<objective>``).

The calibration is the study's device's if cached (``results/calibration``), else ``--calibration
FILE.json``; without one every target is roofline-only, said in each row. A study run on the CPU
fallback measured a tiny model for the mechanics: its real designs (the configured model and
workload it priced beside, ``predicted_<gpu>.csv``) are the ones predicted (``real_designs``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from ..analysis.hardware import available
from ..analysis.study_targets import predict_designs, study_calibration
from ..common import row as R
from ..common.atomic import write_atomic, write_text
from ..common.env import slug
from ..common.row import RATE, STAGES, TIME, pred
from .fronts import compare, plot
from .tables import design_label, load_study, named_twice


def real_designs(meta: dict, study_dir: Path):
    """A CPU fallback study's real designs, ``(meta, df, file)``: its first ``predicted_<gpu>.csv``
    (the configured model's designs at the configured workload; their ``state`` kept, so a design
    its constraints pruned is not priced), each labelled by the design fields that vary, its
    predicted figures dropped (a target's own are computed; the analytic ones kept), ``meta``'s
    workload and mode theirs. None for a study that measured its own designs: run on a GPU, or
    on the CPU with ``cpu.enabled=false`` (its rows' model is the study's), or with no such file
    or no design in it."""
    files = sorted(study_dir.glob("predicted_*.csv"))
    if (meta.get("hardware_spec") or {}).get("kind") != "cpu" or not files:
        return None
    df = pd.read_csv(files[0])
    base = (meta.get("base_model") or {}).get("name")
    if df.empty or "model" not in df or (df["model"] == base).all():
        return None
    vary = [c for c in R.PREDICTED_DESIGN if c in df and df[c].nunique(dropna=False) > 1]
    drop = [c for c in df if c in R.COLUMNS and R.COLUMNS[c].kind != "analytic"]
    df = df.drop(columns=drop).assign(
        design=[", ".join(f"{c}={r[c]}" for c in vary) or "base design" for _, r in df.iterrows()])
    if "state" not in df:
        df["state"] = "COMPLETE"
    first = df.iloc[0]
    wl = {k: int(first[k]) for k in ("batch", "prompt_len", "new_tokens")
          if k in df and pd.notna(first[k])}
    return (dict(meta, workload=dict(meta["workload"], **wl),
                 mode=first.get("mode", meta.get("mode"))), df, files[0].name)


def _ordinal(n) -> str:
    if not isinstance(n, (int, float)) or math.isnan(n):
        return "-"
    n = int(n)
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def rank_table(w: pd.DataFrame, targets: list[str]) -> pd.DataFrame:
    """One row per design: its rank on each target in ordinal words, or why it has none: ``does
    not fit`` (its weights and KV cache exceed the target's memory) or ``not predicted: <the
    reason>`` (the spec lacks a figure the design needs)."""
    def why(r):
        if r.get("basis_kind") == "not predicted":
            return f"not predicted: {r.get('prediction_reason', '')}"
        if r.get("fits_memory") is False or r.get("fits_memory") == 0:
            return "does not fit"
        return _ordinal(r.get("rank"))

    w = w.assign(rank_words=[why(r) for r in w.to_dict(orient="records")])
    t = w.pivot_table(index="design", columns="target", values="rank_words", aggfunc="first")
    return t.reindex(index=w.design.unique(), columns=targets).reset_index()  # the study's order


def figures_table(w: pd.DataFrame, targets: list[str]) -> pd.DataFrame:
    """One row per design and target: each stage's predicted time (ms) with its interval,
    ``"3.09 (2.67-3.57)"``, or the point alone where its basis has none (roofline x stated
    efficiencies), and the basis kind."""
    def shown(r, st):
        t, lo, hi = (r.get(pred(st, k)) for k in (None, "lo", "hi"))
        if t is None or not math.isfinite(t):
            return ""
        ok = all(v is not None and math.isfinite(v) for v in (lo, hi))
        return f"{t:.3g} ({lo:.3g}-{hi:.3g})" if ok else f"{t:.3g}"

    rows = [{"design": r["design"], "target": r["target"],
             "TPOT ms": shown(r, "decode"), "TTFT ms": shown(r, "prefill"),
             "basis": r.get("basis_kind", "")}
            for r in w.to_dict(orient="records") if r["target"] in targets]
    return pd.DataFrame(rows, columns=["design", "target", "TPOT ms", "TTFT ms", "basis"])


def _stage_of(objective: str) -> str | None:
    return next((st for st in STAGES if objective in (TIME[st], RATE[st])), None)


def _apart(f: pd.DataFrame, x: str, y: str, lo: str, hi: str) -> float | bool:
    """Whether designs ``x`` and ``y`` (rows of ``f``) have intervals ``[lo, hi]`` that do not
    overlap; NaN where either has none."""
    if lo not in f or f.loc[[x, y], [lo, hi]].isna().any().any():
        return math.nan
    return bool(f.at[x, hi] < f.at[y, lo] or f.at[y, hi] < f.at[x, lo])


def rank_changes(w: pd.DataFrame, targets: list[str], objective: str) -> pd.DataFrame:
    """Every pair of designs whose order by ``objective`` on a target differs from their order
    on the first target, and whether the change survives the intervals: on both targets the
    two designs' predicted time intervals (``{stage}_pred_ms_lo`` / ``_hi``) do not overlap.
    ``survives`` is NaN where a target's rows carry no interval (roofline only)."""
    st = _stage_of(objective)
    ref, out = targets[0], []
    cols = ["target", "design_a", "design_b", f"rank_a_{ref}", f"rank_b_{ref}", "rank_a",
            "rank_b", "basis", "survives"]  # the header kept when no pair changes order
    if st is None:
        return pd.DataFrame(columns=cols)
    lo, hi = pred(st, "lo"), pred(st, "hi")
    by = {t: w[(w.target == t) & w["rank"].notna()].drop_duplicates("design").set_index("design")
          for t in targets}
    for t in targets[1:]:
        a, b = by[ref], by[t]
        common = sorted(set(a.index) & set(b.index))
        for i, d1 in enumerate(common):
            for d2 in common[i + 1:]:
                if (a.at[d1, "rank"] < a.at[d2, "rank"]) == (b.at[d1, "rank"] < b.at[d2, "rank"]):
                    continue
                sa, sb = _apart(a, d1, d2, lo, hi), _apart(b, d1, d2, lo, hi)
                out.append({"target": t, "design_a": d1, "design_b": d2,
                            f"rank_a_{ref}": a.at[d1, "rank"], f"rank_b_{ref}": a.at[d2, "rank"],
                            "rank_a": b.at[d1, "rank"], "rank_b": b.at[d2, "rank"],
                            "basis": b.at[d1, "basis_kind"],
                            "survives": (sa and sb) if not (pd.isna(sa) or pd.isna(sb))
                            else math.nan})
    return pd.DataFrame(out, columns=cols)


def _owner(fronts_json: Path):
    """The study whose what-if wrote ``fronts_json`` (resolved), or None (another comparison's,
    or unreadable): a what-if writes over only its own study's outputs."""
    try:
        old = json.loads(fronts_json.read_text())
        return Path(old["study"]).resolve() if isinstance(old, dict) and "study" in old else None
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    """The command line (the module's text): 0 once the tables are written, 2 on an unknown
    target or a folder that is no study.

    Raises:
        FileNotFoundError, ValueError: a ``--calibration`` file missing or not a calibration.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="python -m sweep.cli.whatif --check-public | --fit-public:"
                                        " the targets against public measurements (--help there)")
    ap.add_argument("studies", nargs="+", help="study folders (results/<study>)")
    ap.add_argument("--hardware", nargs="+", required=True, metavar="SPEC",
                    help=f"targets, of: {' '.join(n for n in available() if n != 'cpu')}")
    ap.add_argument("--calibration", help="a calibration .json (default: the study device's)")
    ap.add_argument("--out", help="output folder (default whatif/<study> beside the study, in "
                    "its results_dir)")
    a = ap.parse_args(argv)
    bad = [h for h in a.hardware if h not in available()]
    if bad:
        print(f"error: unknown hardware {', '.join(bad)}; known: {', '.join(available())}",
              file=sys.stderr)
        return 2
    from ..analysis.calibration_store import load_file

    twice = next((x for i, x in enumerate(a.hardware) if x in a.hardware[:i]), None)
    if twice := twice or named_twice(a.studies):  # each row once: h200 h200 ranked each twice
        print(f"error: {twice} named twice", file=sys.stderr)
        return 2
    given = load_file(a.calibration) if a.calibration else None  # refused before any work
    try:  # every study read before any output is written
        studies = [(s, *load_study(s)) for s in a.studies]
        for s, _, df in studies:
            if "state" in df and not (df["state"] == "COMPLETE").any():
                raise ValueError(f"{s}: no completed design to predict")
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    names = [slug(Path(s).name) for s in a.studies]
    names = names if len(set(names)) == len(names) else [f"{i + 1}-{n}" for i, n in
                                                         enumerate(names)]
    for (s, meta, df), name in zip(studies, names):
        cal = study_calibration(meta, given, Path(s))
        if (real := real_designs(meta, Path(s))) is not None:
            meta, df, model = real
            print(f"{s}: measured on the CPU fallback (a tiny model): its real designs, "
                  f"{model}'s, predicted")
        try:
            w = predict_designs(meta, df, a.hardware, cal, label=design_label)
            if w.empty:
                raise ValueError("no completed design to predict")
        except (KeyError, ValueError) as e:
            print(f"error: {s}: {e}", file=sys.stderr)
            return 2
        out = Path(a.out) / name if a.out and len(a.studies) > 1 else \
            Path(a.out) if a.out else Path(s).resolve().parent / "whatif" / slug(Path(s).name)
        if (prev := out / "fronts.json").exists() and _owner(prev) != Path(s).resolve():
            print(f"error: {out} holds another comparison's outputs; --out names another folder",
                  file=sys.stderr)
            return 2
        out.mkdir(parents=True, exist_ok=True)
        ranks = rank_table(w, a.hardware)
        changes = rank_changes(w, a.hardware, meta["objectives"][0])
        for name, frame in (("whatif.csv", w), ("ranks.csv", ranks),
                            ("rank_changes.csv", changes)):
            write_atomic(out / name, lambda p, f=frame: f.to_csv(p, index=False))
        objectives, directions = meta["objectives"], meta["directions"]
        per = [(t, {"device": t, "workload": meta["workload"]},
                w[w.target == t].assign(state="COMPLETE").reset_index(drop=True))
               for t in a.hardware]
        per = [(t, m, d[(d.fits_memory != False) & d[objectives].notna().all(axis=1)])  # noqa: E712
               for t, m, d in per]
        left = {}  # targets with no point on the plots, and why
        for t, _, d in per:
            if d.empty:
                wt = w[w.target == t]
                why = wt.prediction_reason.dropna() if "prediction_reason" in wt else []
                left[t] = f"not predicted: {why.iloc[0]}" if len(why) else \
                    "no design fits its memory"
        try:
            table, summary = compare([p for p in per if not p[2].empty], objectives, directions)
            wl = meta["workload"]
            plot([p for p in per if not p[2].empty], table, objectives, directions, out,
                 title=f"{meta.get('study', s)}: PREDICTED fronts on {', '.join(a.hardware)} "
                       f"(batch {wl.get('batch')}, prompt {wl.get('prompt_len')})")
            write_atomic(out / "fronts.csv", lambda p, t=table: t.to_csv(p, index=False))
        except ValueError as e:
            summary = {"error": str(e)}
        summary.update(study=str(Path(s).resolve()), device=meta.get("device"), targets=a.hardware,
                       calibration=(cal.meta.get("device") if cal else None),
                       bases=w.groupby("target").prediction_basis.first().to_dict(),
                       left_out=left)
        write_text(out / "fronts.json", json.dumps(summary, indent=1, default=str))
        with pd.option_context("display.width", 200, "display.max_colwidth", 40):
            print(f"ranks by {objectives[0]} ({directions[0]}) on each target:")
            print(ranks.to_string(index=False))
            print("\npredicted per design and target, with the interval (80% of public figures "
                  "held leave-one-chip-out, where the basis is a public fit):")
            print(figures_table(w, a.hardware).to_string(index=False))
        for t, why in left.items():
            print(f"not on the plots: {t} ({why})")
        unranked = [t for t in a.hardware if not w[w.target == t]["rank"].notna().any()]
        if unranked:  # no design priced there: no order to keep or change
            print(f"no design ranked on {', '.join(unranked)}: rank changes not judged there")
        if a.hardware[0] not in unranked and changes.empty:
            print(f"rank changes against {a.hardware[0]}: none (every pair keeps its order"
                  + (f" on {', '.join(t for t in a.hardware[1:] if t not in unranked)})"
                     if unranked else ")"))
        elif not changes.empty:
            kept = changes[changes.survives == True]  # noqa: E712 - NaN: no interval
            print(f"rank changes against {a.hardware[0]}: {len(changes)} pairs, {len(kept)} "
                  "survive the intervals" + "".join(
                      f"\n  {r.target}: {r.design_a} / {r.design_b}" for r in kept.itertuples()))
        print(f"wrote {out}/whatif.csv, ranks.csv, rank_changes.csv, fronts.png, fronts.html, "
              "fronts.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
