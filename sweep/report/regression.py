"""Regression check between two result sets of the same designs: ``python -m sweep.cli.compare OLD NEW``.

OLD and NEW are study folders (holding ``trials.parquet``), parquet files or CSV files (a study's
``trials.csv``, as ``results/reference/main_job/`` keeps the main job's rows per GPU). Trials are matched on
their design and workload fields; for each metric a regression is flagged when NEW is worse than
OLD by more than ``--threshold`` (relative, default 5%) **and** outside OLD's spread: for times,
NEW's fastest repeat is slower than OLD's p90 (the spreads do not overlap). A design COMPLETE in
OLD that NEW holds but did not complete (FAIL, PRUNED, still queued) is a regression too, named
with NEW's state and reason (``missing``); one NEW lacks altogether is listed, and is a regression
only with ``--require-all`` (a gate on a whole study: ``bench/main_job_gate.sh``), so NEW may be a
subset. Exit code 1 if any metric regressed or any such design went missing, so CI or a person
can gate on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from ..common import row as R
from ..common.row import COLUMNS, CONTENDED, REGRESSION, spread_of
from .tables import flag, row_keys

# metric -> (higher is better, spread columns (min, p90) of the underlying time or None)
METRICS = {c: (COLUMNS[c].direction == "max", spread_of(c)) for c in REGRESSION}


def load(path: str | Path, every_state: bool = False) -> pd.DataFrame:
    """Completed trials (``every_state``: every trial) of a study folder, a parquet file or a
    CSV file.

    Raises:
        FileNotFoundError: neither a study folder nor a trials file (named). ValueError: a file
            that is unreadable or not a trials table (named)."""
    p = Path(path)
    f = p / "trials.parquet" if p.is_dir() else p
    if not f.is_file():
        raise FileNotFoundError(f"{path}: no study folder (with trials.parquet) or trials parquet "
                                "or CSV file there")
    try:
        df = pd.read_csv(f) if f.suffix == ".csv" else pd.read_parquet(f)
    except (OSError, ValueError) as e:  # empty, truncated (pandas' and pyarrow's ValueErrors)
        raise ValueError(f"{f}: unreadable as a trials table ({str(e).splitlines()[0]})") from None
    df = df.rename(columns=R.renamed(df.columns))
    if "state" not in df and not any(c in df for c in REGRESSION):  # (a study whose every
        # design failed has no figure, but its states: NEW failing them all is a regression)
        raise ValueError(f"{f}: not a trials table (none of {', '.join(REGRESSION)}: a study's "
                         "trials.parquet / trials.csv, or a record's rows)")
    return df if every_state else completed(df)


def completed(df: pd.DataFrame) -> pd.DataFrame:
    """The COMPLETE trials of ``df`` (all of a table without a ``state``: a record's rows)."""
    return df[df["state"] == "COMPLETE"] if "state" in df else df


def where(df: pd.DataFrame) -> set[str]:
    """Where ``df``'s rows were measured (``measured on <device>``) or priced (``predicted on
    <hardware_spec>``); a row that says neither is left out."""
    pred = flag(df, "predicted")
    dev, spec = df.get("device", pd.Series(index=df.index)), df.get("hardware_spec")
    spec = spec if spec is not None else pd.Series(index=df.index)
    return {f"predicted on {s}" if p else f"measured on {d}" for p, d, s in zip(pred, dev, spec)
            if isinstance(s if p else d, str) and (s if p else d)}


def _contended(v) -> bool:
    return v is True or (isinstance(v, str) and v.lower() == "true")


def _key_text(v) -> str:
    """A design key's value as the merge compares it: a missing value (NaN from a CSV, None or
    ``pd.NA`` from a parquet, ``""``: ``report.tables.write_table``'s unset value of a mixed
    column) as ``None``, a whole float as its integer (``4096.0`` read back from a CSV beside
    ``4096``), anything else as ``str``."""
    if v is None or v is pd.NA or v == "" or (isinstance(v, float) and v != v):
        return "None"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _keyed(d: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``d`` with its design ``keys`` as ``_key_text`` writes them, so that two files match."""
    return d.assign(**{k: d[k].map(_key_text) for k in keys})


LABEL = ("n_kv_heads", "head_dim", "d_model", "n_layers", "ffn_dim", "kernels", "kv_dtype", "mode",
         "batch")  # the keys every design's label shows (``compare``)


def compare(old: pd.DataFrame, new: pd.DataFrame, threshold: float = 0.05) -> pd.DataFrame:
    """One row per (design, metric) present in both: old, new, ``better_pct`` (the relative
    change in the metric's good direction: positive is better, whichever way the number moved),
    ``change`` in words (``12.3% better``), and ``regression`` (bool) by the rule in the module
    docstring."""
    keys = row_keys(old, new)
    old, new = (d if CONTENDED in d else  # a record from before the flag: measured alone
                pd.concat([d, pd.Series(False, index=d.index, name=CONTENDED)], axis=1)
                for d in (old, new))
    # the same design read from a CSV record and from a study's parquet may type a key apart
    # (an unset sliding_window: float NaN there, None in an object column here): merged as text
    old, new = _keyed(old, keys), _keyed(new, keys)
    m = old.merge(new, on=keys, suffixes=("_old", "_new"))
    rows = []
    # a design's label: the main fields, and every key that tells the compared designs apart
    # (an MoE study's n_experts, n_experts_active, expert_ffn_dim, a routing_skew, ...)
    shown = [k for k in keys if k in LABEL or m[k].nunique(dropna=False) > 1]
    for r in m.to_dict(orient="records"):  # keeps each column's type (iterrows casts to float)
        design = ", ".join(f"{k}={r[k]}" for k in shown)
        for metric, (higher, spread) in METRICS.items():
            a, b = r.get(f"{metric}_old"), r.get(f"{metric}_new")
            if a is None or b is None or pd.isna(a) or pd.isna(b) or a == 0:
                continue
            change = (b - a) / a if higher else (a - b) / a
            worse = change < -threshold
            if worse and spread is not None:
                new_min, old_p90 = r.get(f"{spread[0]}_new"), r.get(f"{spread[1]}_old")
                if new_min is not None and old_p90 is not None and not pd.isna(new_min):
                    worse = new_min > old_p90
            shared = [w for w in ("old", "new") if _contended(r.get(f"{CONTENDED}_{w}"))]
            if shared:  # measured beside another job: not judged, said so
                worse = False
            rows.append({"design": design, "metric": metric, "old": a, "new": b,
                         "better_pct": 100 * change,
                         "change": f"{abs(100 * change):.1f}% {'better' if change >= 0 else 'worse'}"
                                   f" ({'higher' if higher else 'lower'} is better)",
                         "regression": bool(worse), CONTENDED: ",".join(shared)})
    return pd.DataFrame(rows)


def missing(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """The designs of ``old`` (completed trials) that no completed trial of ``new`` (every
    state) matches on ``report.tables.row_keys``: one row each, ``design`` (its label) and what
    NEW holds of it, ``new_state`` (``FAIL``, ``PRUNED``, ``WAITING``, ..., or ``absent``) with
    its ``fail_reason``: a design that completed before and does not now (``main`` judges
    them)."""
    keys = row_keys(old, new)
    old, new = _keyed(old, keys), _keyed(new, keys)
    done = completed(new)
    have = {tuple(r[k] for k in keys) for r in done.to_dict(orient="records")}
    held = {tuple(r[k] for k in keys): r for r in new.to_dict(orient="records")}  # its last trial
    shown = [k for k in keys if k in LABEL or old[k].nunique(dropna=False) > 1]
    rows = []
    for r in old.drop_duplicates(keys).to_dict(orient="records"):
        key = tuple(r[k] for k in keys)
        if key in have:
            continue
        h = held.get(key, {})
        reason = h.get("fail_reason")
        rows.append({"design": ", ".join(f"{k}={r[k]}" for k in shown),
                     "new_state": h.get("state", "absent"),
                     "fail_reason": "" if reason is None or reason != reason else str(reason)})
    return pd.DataFrame(rows, columns=["design", "new_state", "fail_reason"])


def main(argv: list[str] | None = None) -> int:
    """The command line: 0 without a regression, 1 with some (a design NEW did not complete
    among them), 2 when NEW holds none of OLD's designs or was measured or priced on other
    hardware (``where``).

    Raises:
        ValueError: ``--threshold`` outside [0, 1). FileNotFoundError: a path that is no study.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", metavar="PATH",
                    help="OLD and NEW: two study folders or trials files")
    ap.add_argument("--threshold", type=float, default=0.05,
                    help="the relative change beyond the spread that is a regression (0.05: 5%%)")
    ap.add_argument("--require-all", action="store_true",
                    help="a design of OLD that NEW lacks altogether is a regression too (a gate "
                    "on a whole study; without it NEW may be a subset)")
    a = ap.parse_args(argv)
    if len(a.paths) != 2:  # a shell glob that matched several folders (a predicted study too)
        raise ValueError(f"two result sets to compare, OLD and NEW; got {len(a.paths)}: "
                         + ", ".join(a.paths) + " (name each folder)")
    if not 0 <= a.threshold < 1:
        raise ValueError(f"--threshold={a.threshold}: a relative change in [0, 1) (0.05: 5%)")
    old, new_all = load(a.paths[0]), load(a.paths[1], every_state=True)
    new = completed(new_all)
    if (w_old := where(old)) and (w_new := where(new_all)) and w_old != w_new:
        print(f"error: OLD was {' and '.join(sorted(w_old))}, NEW {' and '.join(sorted(w_new))}: "
              "a regression is a change on the same hardware, measured (or priced) alike; "
              "python -m sweep.cli.compare_fronts compares studies across hardware",
              file=sys.stderr)
        return 2
    res = compare(old, new, a.threshold)
    gone = missing(old, new_all)
    keys = row_keys(old, new_all)
    n_old = len(_keyed(old, keys).drop_duplicates(keys))
    failed, absent = gone[gone.new_state != "absent"], gone[gone.new_state == "absent"]
    if res.empty and failed.empty:
        print(f"error: {a.paths[0]} and {a.paths[1]} share no design (the same model, workload, "
              "kernels and switches): nothing to compare", file=sys.stderr)
        return 2
    if len(res):
        print(res.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    bad = res[res.regression] if len(res) else res
    shared = res[res[CONTENDED] != ""] if len(res) else res
    if len(shared):
        print(f"\n{shared.design.nunique()} design(s) measured while another process used the "
              "device (contended): not judged; measure them again alone")
    print(f"\n{len(bad)} regression(s) beyond {a.threshold:.0%} and the spread")
    print(f"{n_old - len(gone)} of OLD's {n_old} completed designs completed in NEW")
    if len(failed):
        print(f"{len(failed)} design(s) of OLD that NEW holds but did not complete (a regression "
              "each):\n" + failed.to_string(index=False))
    if len(absent):
        print(f"{len(absent)} design(s) of OLD that NEW does not hold"
              + (" (a regression each: --require-all):" if a.require_all else
                 " (not judged: NEW may be a subset; --require-all judges them):")
              + "\n" + absent.design.to_string(index=False))
    return 1 if len(bad) or len(failed) or (a.require_all and len(absent)) else 0


if __name__ == "__main__":
    sys.exit(main())
