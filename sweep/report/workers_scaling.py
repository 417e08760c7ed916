"""Check a several-worker study against a one-worker study of the same designs:
``python -m sweep.cli.workers_check ONE_WORKER_STUDY N_WORKER_STUDY [--out check.json]``.

Reports and checks (exit 1 if any check fails):

- trial rate: finished designs per second of the study run's wall time (``study.json``
  ``run_wall_s``), and the ratio N-worker / one-worker (``--min-speedup``, default 1.6);
- integrity: every design of the one-worker study ran exactly once in the N-worker study (none lost,
  none twice), all COMPLETE;
- isolation: on each GPU (``worker_gpu``) the trials' start-end intervals never overlap, so two
  measurements never shared a GPU;
- agreement: per design, decode TPOT and TTFT agree between the runs: their [min, p90] spreads over
  the repeats overlap, or the medians differ by at most ``--tolerance`` (default 3%).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from ..common.atomic import write_text
from ..common.row import TIME, spread_of
from .tables import load_study, row_keys

FIGURES = {TIME[st]: spread_of(TIME[st]) for st in ("decode", "prefill")}


def check(one: Path, many: Path, min_speedup: float = 1.6, tolerance: float = 0.03) -> dict:
    """The checks of the module docstring as a dict: ``rates``, ``speedup``, ``integrity``,
    ``isolation``, ``agreement`` (per design and figure) and ``ok`` per check."""
    m1, d1 = load_study(one)
    mn, dn = load_study(many)
    keys = row_keys(d1, dn)
    r1 = len(d1[d1.state != "RUNNING"]) / m1["run_wall_s"]
    rn = len(dn[dn.state != "RUNNING"]) / mn["run_wall_s"]
    out = {"one": str(one), "many": str(many), "workers": mn.get("workers"),
           "rates_designs_per_s": {"one_worker": r1, "n_workers": rn},
           "run_wall_s": {"one_worker": m1["run_wall_s"], "n_workers": mn["run_wall_s"]},
           "designs": {"one_worker": len(d1), "n_workers": len(dn)}, "speedup": rn / r1}
    want = sorted(map(tuple, d1[keys].astype(str).to_numpy().tolist()))
    got = sorted(map(tuple, dn[keys].astype(str).to_numpy().tolist()))
    dup = len(got) - len(set(got))
    out["integrity"] = {"missing": [list(k) for k in set(want) - set(got)],
                        "duplicates": dup, "not_complete": int((dn.state != "COMPLETE").sum())}
    overlaps = []
    if "worker_gpu" in dn.columns:
        for gpu, g in dn.dropna(subset=["trial_start", "trial_end"]).groupby("worker_gpu"):
            iv = sorted(zip(pd.to_datetime(g.trial_start), pd.to_datetime(g.trial_end)))
            overlaps += [str(gpu) for (s0, e0), (s1, _) in zip(iv, iv[1:]) if s1 < e0]
        out["per_gpu_trials"] = dn.worker_gpu.value_counts().to_dict()
    out["isolation"] = {"overlapping_trials_on_a_gpu": overlaps}
    rows = []
    both = d1.merge(dn, on=keys, suffixes=("_1", "_n"))
    for r in both.to_dict(orient="records"):
        for fig, (lo, hi) in FIGURES.items():
            a, b = r[f"{fig}_1"], r[f"{fig}_n"]
            overlap = r[f"{lo}_1"] <= r[f"{hi}_n"] and r[f"{lo}_n"] <= r[f"{hi}_1"]
            rel = abs(b - a) / a
            rows.append({"design": ", ".join(f"{k}={r[k]}" for k in ("n_kv_heads", "kv_dtype",
                                                                       "kernels", "mode")
                                             if k in r),
                         "figure": fig, "one_worker": a, "n_workers": b, "rel_diff": rel,
                         "spreads_overlap": bool(overlap),
                         "agree": bool(overlap or rel <= tolerance)})
    out["agreement"] = rows
    out["ok"] = {"speedup": out["speedup"] >= min_speedup,
                 "integrity": not out["integrity"]["missing"] and dup == 0
                 and out["integrity"]["not_complete"] == 0 and len(got) == len(want),
                 "isolation": not overlaps,
                 "agreement": all(r["agree"] for r in rows) and bool(rows)}
    out["criteria"] = {"min_speedup": min_speedup, "tolerance": tolerance}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("one")
    ap.add_argument("many")
    ap.add_argument("--out")
    ap.add_argument("--min-speedup", type=float, default=1.6)
    ap.add_argument("--tolerance", type=float, default=0.03)
    a = ap.parse_args(argv)
    res = check(Path(a.one), Path(a.many), a.min_speedup, a.tolerance)
    print(pd.DataFrame(res["agreement"]).to_string(index=False,
                                                   float_format=lambda v: f"{v:.4g}"))
    print(json.dumps({k: res[k] for k in ("rates_designs_per_s", "run_wall_s", "speedup",
                                          "integrity", "isolation", "ok")}, indent=1,
                     default=str))
    if a.out:
        write_text(a.out, json.dumps(res, indent=1, default=str))
    return 0 if all(res["ok"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
