"""Bundle finished studies into a committed reference record: ``results/reference/<name>.json``.

``python -m sweep.cli.record --restore RECORD.json OUT_DIR`` writes a record's studies back as study
folders and draws their plots and reports again (``restore``).

``python -m sweep.cli.record OUT.json --command "..." STUDY_DIR [STUDY_DIR ...]`` writes
``{"device", "versions", "command", "date", "ceilings", "studies": [{"study", "experiment",
"workload", "objectives", "trials": [rows]}]}``: everything needed to re-run and compare.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from pathlib import Path

from ..common.atomic import write_json
from .tables import load_study, named_twice


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def study_record(study_dir: Path, columns: list[str] | None = None) -> dict:
    """One study's meta (``study.json``) and its trials table as a list of row dicts."""
    meta, df = load_study(study_dir)
    if columns:
        df = df[[c for c in columns if c in df.columns]]
    rows = [{k: _clean(v) for k, v in r.items()} for r in df.to_dict(orient="records")]
    return {k: meta.get(k) for k in KEPT} | {"trials": rows, "meta": meta}


# what a record keeps of a study's study.json (``predict``: a predict-only study's figures are the
# model's, and its report says so once restored)
KEPT = ("study", "experiment", "workload", "objectives", "directions", "mode", "space", "predict")


def restore(record: Path, out_dir: Path) -> list[Path]:
    """Write each study of a reference record back as a study folder (``study.json`` +
    ``trials.parquet`` under ``out_dir/<study>``), with its plots and HTML report drawn again,
    so a committed record's report is regenerated with no GPU. Returns the study folders."""
    import pandas as pd

    from ..common.atomic import write_json
    from . import html_report, plots
    from .tables import write_table

    rec = json.loads(Path(record).read_text())
    names = [s["study"] for s in rec["studies"]]
    if len(set(names)) < len(names):  # one folder each: a second would write over the first
        twice = next(n for n in names if names.count(n) > 1)
        raise FileExistsError(f"{record}: holds two studies named {twice!r}; one folder each "
                              "would write one over the other")
    taken = [Path(out_dir) / s["study"] for s in rec["studies"]
             if any((Path(out_dir) / s["study"] / f).exists() for f in ("study.json", "owner.json"))]
    if taken:  # a live study's files, or an earlier restore's: never written over
        raise FileExistsError(f"{taken[0]} holds a study already; restore into another folder")
    out = []
    for s in rec["studies"]:
        d = Path(out_dir) / s["study"]
        df = pd.DataFrame(s["trials"])
        write_table(df, d)
        env = {k: df[k].iloc[0] for k in ("device", "torch", "triton", "cuda", "driver", "python",
                                          "git_sha", "timestamp") if k in df and len(df)}
        write_json(d / "study.json", {**{k: s.get(k) for k in KEPT},
            "hardware_spec": rec.get("hardware_spec", {}), "ceilings": rec.get("ceilings", {}),
            "env": env, "storage": f"(restored from {record})"})
        plots.pareto_plot(df, s["objectives"], s["directions"], d, title=s["study"])
        plots.roofline_plot(df, d, title=s["study"])
        html_report.write_report(d)
        out.append(d)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--restore"]:
        if len(argv) != 3:
            print("usage: python -m sweep.cli.record --restore RECORD.json OUT_DIR", file=sys.stderr)
            return 2
        try:
            for d in restore(Path(argv[1]), Path(argv[2])):
                print(d)
        except FileExistsError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the record to write, a .json file (refused if it exists: a "
                    "record is never overwritten)")
    ap.add_argument("studies", nargs="+", help="finished study directories")
    ap.add_argument("--command", required=True, help="the command that produced the studies")
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    if not a.out.endswith(".json"):
        ap.error(f"out: {a.out!r} is not a .json file (a record is JSON: RECORD.json)")
    if Path(a.out).exists():
        ap.error(f"out: {a.out} exists; a record is never overwritten (name a new one)")
    if twice := named_twice(a.studies):
        ap.error(f"studies: {twice} named twice (its trials would be recorded twice)")
    studies = [study_record(Path(s)) for s in a.studies]
    if len({s["study"] for s in studies}) < len(studies):  # restored, one would replace another
        ap.error("studies: two of one study name (the same study run in two folders); record "
                 "each in its own record")
    env = studies[0]["meta"]["env"]
    rec = {"device": env["device"], "versions": {k: env.get(k) for k in
                                                  ("torch", "triton", "cuda", "python", "driver")},
           "git_sha": env.get("git_sha"), "command": a.command,
           "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "hardware_spec": studies[0]["meta"]["hardware_spec"],
           "ceilings": studies[0]["meta"]["ceilings"], "note": a.note,
           "studies": [{k: v for k, v in s.items() if k != "meta"} for s in studies]}
    write_json(a.out, rec)
    print(f"wrote {a.out}: {sum(len(s['trials']) for s in studies)} trials")
    return 0


if __name__ == "__main__":
    sys.exit(main())
