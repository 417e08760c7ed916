"""Bundle finished studies into a committed reference record: ``results/reference/<name>.json``.

``python -m sweep.record OUT.json --command "..." STUDY_DIR [STUDY_DIR ...]`` writes
``{"device", "versions", "command", "date", "ceilings", "studies": [{"study", "experiment",
"workload", "objectives", "trials": [rows]}]}``: everything needed to re-run and compare.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from pathlib import Path

from ..atomic import write_json
from .tables import load_study


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
    return {k: meta.get(k) for k in ("study", "experiment", "workload", "objectives",
                                     "directions", "mode", "space")} | {"trials": rows,
                                                                          "meta": meta}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("studies", nargs="+")
    ap.add_argument("--command", required=True, help="the command that produced the studies")
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    studies = [study_record(Path(s)) for s in a.studies]
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
