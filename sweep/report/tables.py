"""Tables of a study: the trials table (parquet + CSV), the study-folder reader, the Pareto front rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..common import row as R
from ..common.atomic import write_atomic

SUMMARY_COLUMNS = list(R.SUMMARY)
_INTERNAL = {"design"}


def row_keys(*frames: pd.DataFrame) -> list[str]:
    """The columns that tell one design's rows from another's, those every frame holds: the
    design fields (``zoo.config.DESIGN_FIELDS``), the workload, the decode mode and the kernel
    switches (``switch_<name>``)."""
    from kernels.switches import names as switch_names
    from zoo.config import DESIGN_FIELDS

    keys = [*DESIGN_FIELDS, *R.WORKLOAD, "mode", *(f"switch_{n}" for n in switch_names())]
    return [k for k in keys if all(k in f.columns for f in frames)]


def cut_off(trials) -> dict[int, str]:
    """``{number: why}`` of the trials whose design was cut off and queued again: stopped
    (``interrupted``: Ctrl-C, SIGTERM, a dead process of this host), or failed by Optuna's
    heartbeat (another trial's ``retry_of`` names it: ``sweep.storage.retry_dead``)."""
    out = {t.number: t.user_attrs.get("fail_reason", "interrupted") for t in trials
           if t.user_attrs.get("interrupted")}
    for t in trials:
        if (n := t.user_attrs.get("retry_of")) is not None:
            out.setdefault(n, f"interrupted: {t.user_attrs.get('retry_why', 'its worker died')}; "
                              f"the design was queued again (trial {t.number})")
    return out


def trials_frame(study) -> pd.DataFrame:
    """One row per trial: ``number``, ``state``, the sampled ``param_*``, every user attribute
    (design, workload, environment, measured and derived figures) and ``fail_reason``; no row for
    a worker's spare trial nor for a sampler's repeat of a design (``duplicate_of``: one record per
    design)."""
    rows = []
    trials = study.get_trials(deepcopy=False)
    gone = cut_off(trials)  # a trial failed by the heartbeat carries no reason of its own
    for t in trials:
        if t.user_attrs.get("spare"):  # asked by a worker after the queue ran dry; never run
            continue
        if t.user_attrs.get("duplicate_of") is not None:  # a sampler's second proposal of a
            continue  # design: answered from its first trial's row, which the table holds
        row = {"number": t.number, "state": t.state.name}
        row.update({f"param_{k}": v for k, v in t.params.items()})
        row.update({k: v for k, v in t.user_attrs.items() if k not in _INTERNAL})
        if isinstance(row.get("row"), str):  # the results row, stored as one JSON attribute
            row.update(json.loads(row.pop("row")))
        if t.number in gone:
            row.setdefault("interrupted", True)
            row.setdefault("fail_reason", gone[t.number])
        row.setdefault("fail_reason", "")
        if t.datetime_start:
            row["trial_start"] = t.datetime_start.isoformat()
        if t.datetime_start and t.datetime_complete:
            row["trial_end"] = t.datetime_complete.isoformat()
            row["trial_wall_s"] = (t.datetime_complete - t.datetime_start).total_seconds()
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values("number").reset_index(drop=True)
    return df


def named_twice(paths) -> str | None:
    """The first of ``paths`` naming a folder or file that an earlier one names (resolved: ``a``
    and ``./a/`` are one), or None: a study given twice would count, rank or compare twice."""
    seen = set()
    for p in paths:
        if (r := Path(p).resolve()) in seen:
            return str(p)
        seen.add(r)
    return None


STUDY_KEYS = ("study", "objectives", "directions", "workload", "hardware_spec")  # study.json's


def load_study(study_dir: str | Path) -> tuple[dict, pd.DataFrame]:
    """``(study.json, trials table)`` of a study folder written by ``python -m sweep``.

    Raises:
        FileNotFoundError: not a study folder (names what is missing). ValueError: its files
            are unreadable (truncated, empty), or its study.json is not a study's (``STUDY_KEYS``).
    """
    d = Path(study_dir)
    for f in ("study.json", "trials.parquet"):
        if not (d / f).exists():
            raise FileNotFoundError(f"{d}: no {f} (not a study folder written by python -m sweep)")
    try:
        df = pd.read_parquet(d / "trials.parquet")
        meta = json.loads((d / "study.json").read_text())
    except (OSError, ValueError) as e:  # pyarrow's errors are ValueErrors (ArrowInvalid)
        raise ValueError(f"{d}: its trials.parquet or study.json is unreadable (truncated or "
                         f"empty?): {str(e).splitlines()[0]}") from None
    if not isinstance(meta, dict) or (miss := [k for k in STUDY_KEYS if k not in meta]):
        raise ValueError(f"{d / 'study.json'}: not a study's (" + (
            f"no {', '.join(miss)}" if isinstance(meta, dict) else "not a JSON object") + ")")
    # a study of an earlier day: its columns under today's names (sweep.common.row.RENAMES)
    df = df.rename(columns=R.renamed(df.columns))
    return meta, df


def write_table(df: pd.DataFrame, out_dir: Path) -> None:
    """Write ``trials.parquet`` and ``trials.csv`` into ``out_dir`` atomically (write, rename)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    df = df.copy()
    for col in df.columns:  # mixed-type object columns (e.g. None + str) -> strings for parquet
        if df[col].dtype == object and df[col].map(type).nunique() > 1:
            if _is_flags(df[col]):  # a queued design's unset switch: missing, not the text "nan"
                df[col] = df[col].map(lambda v: bool(v) if isinstance(v, bool | np.bool_)
                                      else pd.NA).astype("boolean")
                continue
            df[col] = df[col].map(lambda v: v if isinstance(v, str) else
                                  ("" if v is None else json.dumps(v)
                                   if isinstance(v, (dict, list)) else str(v)))
    write_atomic(out_dir / "trials.parquet", lambda p: df.to_parquet(p, index=False))
    write_atomic(out_dir / "trials.csv", lambda p: df.to_csv(p, index=False))


def _is_flags(col: pd.Series) -> bool:
    """Whether an object column holds only booleans and missing values (None, NaN)."""
    have = col[col.map(lambda v: not (v is None or (isinstance(v, float) and math.isnan(v))))]
    return len(have) > 0 and have.map(lambda v: isinstance(v, bool | np.bool_)).all()


def _before(cols: list, extra: list, column: str) -> list:
    """``cols`` with ``extra`` inserted before ``column`` (at the end without it)."""
    at = cols.index(column) if column in cols else len(cols)
    return cols[:at] + extra + cols[at:]


def summary_table(df: pd.DataFrame, objectives: tuple | list = (), most: int = 60) -> str:
    """A short text table of the key columns (those present; the KV format, kernels and mode
    where they vary) and the study's ``objectives`` (before the failure reason: a front's ``*``
    can be checked against them); at most ``most`` rows in trial order, the count of the rest
    said (a predict-only study of 2400 designs printed every one)."""
    if df.empty:
        return "(no trials)"
    cols = [c for c in SUMMARY_COLUMNS
            if c in df.columns and shown(c, df)]
    cols = _before(cols, [o for o in objectives if o in df.columns and o not in cols],
                   "fail_reason")
    varying = [c for c in R.SUMMARY_VARYING if c in df.columns and df[c].nunique() > 1]
    out = df[_before(cols, varying, "batch")].copy()
    if "fail_reason" in out:
        out["fail_reason"] = out["fail_reason"].fillna("").astype(str).str.slice(0, 100)
    unmeasured = [c for c in out.columns if f"{c}_reason" in df and out[c].isna().all()]
    for c in unmeasured:  # (a CPU run's peak_mem_bytes: None read as a figure)
        out[c] = "n/a"
    more = len(out) - most
    return out.head(most).to_string(index=False, float_format=lambda v: f"{v:.4g}") + (
        f"\n({more} more rows in trials.csv; report.html shows the front)" if more > 0 else "") + (
        f"\n(n/a: not measured here; trials.csv's {unmeasured[0]}_reason says why)"
        if unmeasured else "")


def pareto_mask(values: pd.DataFrame, directions: list[str]) -> pd.Series:
    """True for rows not dominated by any other row (``directions``: maximize/minimize each)."""
    sign = [1 if d == "maximize" else -1 for d in directions]
    v = values.to_numpy(dtype=float) * sign
    keep = []
    for i in range(len(v)):
        dominated = any((v[j] >= v[i]).all() and (v[j] > v[i]).any() for j in range(len(v))
                        if j != i)
        keep.append(not dominated)
    return pd.Series(keep, index=values.index)


def front_rows(df: pd.DataFrame, objectives: list[str], directions: list[str]) -> pd.DataFrame:
    """The completed trials with every objective measured that are on the Pareto front."""
    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    if done.empty or not set(objectives) <= set(done.columns):
        return done.iloc[0:0]
    vals = done[objectives].astype(float)
    ok = vals.notna().all(axis=1)
    mask = pd.Series(False, index=done.index)
    mask[ok] = pareto_mask(vals[ok], directions)
    return done[mask]


def design_label(row) -> str:
    """``name=value, ...`` of the sampled parameters (``param_*``) of a trial row; a row that
    already names its design (``design``, e.g. a what-if row) keeps that name."""
    ps = [c for c in row.index if str(c).startswith("param_") and pd.notna(row[c])]
    if not ps and isinstance(row.get("design"), str) and row.get("design"):
        return row["design"]
    return ", ".join(f"{c[6:]}={row[c]}" for c in ps) or f"trial {row.get('number')}"


PREDICTED_COLUMNS = list(R.PREDICTED_SUMMARY)


def shows_moe(df: pd.DataFrame) -> bool:
    """Whether a table holds a mixture of experts (its MoE columns are shown: ``R.MOE_SHOWN``)."""
    return "n_experts" in df and bool((df["n_experts"].fillna(0) > 0).any())


def shows_windows(df: pd.DataFrame) -> bool:
    """Whether a table holds a design with sliding-window layers (``R.WINDOW_SHOWN``)."""
    return "sliding_window" in df and bool(df["sliding_window"].notna().any())


def flag(df: pd.DataFrame, column: str) -> pd.Series:
    """``df``'s boolean ``column`` (``noisy``, ``contended``, ``prediction_stale``, ...) as bools:
    a missing value False, and every row False where ``df`` has no such column."""
    if column not in df:
        return pd.Series(False, index=df.index)
    return df[column].fillna(False).astype(bool)


def shown(column: str, df: pd.DataFrame) -> bool:
    """Whether a table shows ``column``: always, but for the columns of a kind of design it does
    not hold (a mixture of experts' where it holds none, a window's where no layer is local)."""
    return ((column not in R.MOE_SHOWN or shows_moe(df))
            and (column not in R.WINDOW_SHOWN or shows_windows(df)))


def predicted_summary(df: pd.DataFrame, objectives: list[str] | None = None,
                      directions: list[str] | None = None, most: int = 12) -> str:
    """A short text table of predicted designs (``sweep.analysis.targets.predict_designs``): the
    design and workload columns that vary, the predicted figures and the study's ``objectives``,
    the basis, each front design marked ``*`` when ``objectives`` and their ``directions`` are
    given; at most ``most`` rows, the fastest decode first."""
    if df.empty:
        return "(no designs)"
    done = df[df.get("state", "COMPLETE") == "COMPLETE"] if "state" in df else df
    if done.empty:
        why = sorted(df["fail_reason"].dropna().astype(str).unique())[:3] \
            if "fail_reason" in df else []
        keys = sorted({k for r in (df["pruned_by"].dropna() if "pruned_by" in df else ())
                       for k in str(r).split(",") if k})
        hint = ("; the experiment's constraints bound the designs of its own model: "
                + ", ".join(f"'~experiment.constraints.{k}'" for k in keys) + " lifts it"
                if keys else "")
        return (f"(none of the {len(df)} designs priced: " + ("; ".join(why) or "see the file")
                + hint + ")")
    cols = [c for c in PREDICTED_COLUMNS if c in df.columns
            and (c not in R.PREDICTED_DESIGN or df[c].nunique() > 1)
            and shown(c, df)]
    cols = _before(cols, [o for o in objectives or [] if o in df.columns and o not in cols],
                   "basis_kind")
    out = done.sort_values(R.RATE["decode"], ascending=False)[cols].copy() if len(done) else done
    pairs = [(o, d) for o, d in zip(objectives or [], directions or []) if o in done.columns]
    if pairs and len(done):
        front = front_rows(done.assign(state="COMPLETE"), [o for o, _ in pairs],
                           [d for _, d in pairs]).index
        out.insert(0, "front", ["*" if i in front else "" for i in out.index])
    text = out.head(most).to_string(index=False, float_format=lambda v: f"{v:.4g}")
    more = len(df) - min(most, len(out))
    stale = done[flag(done, "prediction_stale")]
    why = (str(stale["prediction_notes"].iloc[0]).split(";")[0]
           if len(stale) and "prediction_notes" in stale else "")
    return (text + (f"\n({more} more in the file)" if more > 0 else "")
            + (f"\n({len(stale)} of {len(done)} priced from a {why})" if len(stale) else ""))
