"""Tables and plots of a study: the trials table (parquet + CSV), the Pareto front (PNG + HTML)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

SUMMARY_COLUMNS = ["number", "state", "n_kv_heads", "n_heads", "head_dim", "d_model", "n_layers",
                   "ffn_dim", "batch", "prompt_len", "ttft_ms", "decode_tpot_ms", "decode_tok_s",
                   "prefill_mfu_vs_measured", "decode_mbu_vs_measured", "kv_bytes_per_token",
                   "peak_mem_bytes", "decode_bound", "fail_reason"]
_INTERNAL = {"design"}


def trials_frame(study) -> pd.DataFrame:
    """One row per trial: ``number``, ``state``, the sampled ``param_*``, every user attribute
    (design, workload, environment, measured and derived figures) and ``fail_reason``."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("spare"):  # asked by a worker after the queue ran dry; never run
            continue
        row = {"number": t.number, "state": t.state.name}
        row.update({f"param_{k}": v for k, v in t.params.items()})
        row.update({k: v for k, v in t.user_attrs.items() if k not in _INTERNAL})
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


def load_study(study_dir: str | Path) -> tuple[dict, pd.DataFrame]:
    """``(study.json, trials table)`` of a study folder written by ``python -m sweep``.

    Raises:
        FileNotFoundError: not a study folder (names what is missing).
    """
    d = Path(study_dir)
    for f in ("study.json", "trials.parquet"):
        if not (d / f).exists():
            raise FileNotFoundError(f"{d}: no {f} (not a study folder written by python -m sweep)")
    return json.loads((d / "study.json").read_text()), pd.read_parquet(d / "trials.parquet")


def write_table(df: pd.DataFrame, out_dir: Path) -> None:
    """Write ``trials.parquet`` and ``trials.csv`` into ``out_dir`` atomically (write, rename)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    df = df.copy()
    for col in df.columns:  # mixed-type object columns (e.g. None + str) -> strings for parquet
        if df[col].dtype == object and df[col].map(type).nunique() > 1:
            df[col] = df[col].map(lambda v: v if isinstance(v, str) else
                                  ("" if v is None else json.dumps(v)
                                   if isinstance(v, (dict, list)) else str(v)))
    for name, write in (("trials.parquet", lambda p: df.to_parquet(p, index=False)),
                        ("trials.csv", lambda p: df.to_csv(p, index=False))):
        tmp = out_dir / f".{name}.tmp"
        write(tmp)
        os.replace(tmp, out_dir / name)


def summary_table(df: pd.DataFrame) -> str:
    """A short text table of the key columns (those present)."""
    if df.empty:
        return "(no trials)"
    cols = [c for c in SUMMARY_COLUMNS if c in df.columns]
    out = df[cols].copy()
    if "fail_reason" in out:
        out["fail_reason"] = out["fail_reason"].fillna("").astype(str).str.slice(0, 40)
    return out.to_string(index=False, float_format=lambda v: f"{v:.4g}")


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
    """``name=value, ...`` of the sampled parameters (``param_*``) of a trial row."""
    ps = [c for c in row.index if str(c).startswith("param_") and pd.notna(row[c])]
    return ", ".join(f"{c[6:]}={row[c]}" for c in ps) or f"trial {row.get('number')}"


def pareto_plot(df: pd.DataFrame, objectives: list[str], directions: list[str], out_dir: Path,
                title: str = "") -> list[Path]:
    """Plot the completed trials in the plane of the first two objectives, Pareto front marked.

    Writes ``pareto.png`` (matplotlib) and ``pareto.html`` (plotly, if installed). With one
    objective the second axis is ``params_non_embedding``. Returns the written paths.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    x_name = objectives[1] if len(objectives) > 1 else "params_non_embedding"
    y_name = objectives[0]
    dirs = [directions[1] if len(objectives) > 1 else "maximize", directions[0]]
    done = df[df.get("state", pd.Series(dtype=str)) == "COMPLETE"] if not df.empty else df
    paths = []
    fig, ax = plt.subplots(figsize=(7, 5))
    if not done.empty and {x_name, y_name} <= set(done.columns):
        pts = done[[x_name, y_name]].astype(float)
        front = pareto_mask(pts, dirs)
        ax.scatter(pts[x_name], pts[y_name], c="0.6", label="designs")
        f = pts[front].sort_values(x_name)
        ax.plot(f[x_name], f[y_name], "o-", c="C3", label="Pareto front")
        for i, r in done.iterrows():
            ax.annotate(design_label(r), (pts.loc[i, x_name], pts.loc[i, y_name]), fontsize=7,
                        textcoords="offset points", xytext=(4, 4))
    else:
        ax.text(0.5, 0.5, "no completed trials", ha="center", transform=ax.transAxes)
    ax.set_xlabel(f"{x_name} ({dirs[0]})")
    ax.set_ylabel(f"{y_name} ({dirs[1]})")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    png = out_dir / "pareto.png"
    fig.savefig(png, dpi=120)
    plt.close(fig)
    paths.append(png)
    try:
        import plotly.express as px
    except ImportError:
        return paths
    if not done.empty and {x_name, y_name} <= set(done.columns):
        d = done.copy()
        d["pareto"] = pareto_mask(d[[x_name, y_name]].astype(float), dirs)
        hover = [c for c in d.columns if c.startswith("param_")] + [
            c for c in ("decode_tpot_ms", "ttft_ms", "decode_mbu_vs_measured") if c in d]
        figp = px.scatter(d, x=x_name, y=y_name, color="pareto", hover_data=hover, title=title)
        html = out_dir / "pareto.html"
        tmp = out_dir / ".pareto.html.tmp"
        figp.write_html(tmp, include_plotlyjs="cdn")
        os.replace(tmp, html)
        paths.append(html)
    return paths



def roofline_plot(df: pd.DataFrame, out_dir: Path, title: str = "") -> Path | None:
    """Roofline of a study (Williams et al. 2009): each completed trial's prefill and decode as
    points at their arithmetic intensity (FLOP/byte; filled: analytic minimum bytes, hollow:
    bytes measured by Nsight Compute where the trial was profiled) and achieved FLOP/s, under the
    measured and datasheet ceilings (bandwidth slope, compute roof). Writes ``roofline.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    need = {"prefill_arith_intensity", "prefill_flop_s", "decode_arith_intensity", "decode_flop_s"}
    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    if done.empty or not need <= set(done.columns):
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    ai = np.logspace(-1, 4, 200)
    r = done.iloc[0]
    for which, style in (("measured", "-"), ("datasheet", "--")):
        pf, pb = r.get(f"peak_flops_{which}"), r.get(f"peak_bytes_s_{which}")
        if pf and pb and np.isfinite(pf) and np.isfinite(pb):
            ax.plot(ai, np.minimum(pf, pb * ai), style, c="k", lw=1,
                    label=f"{which} ceiling ({pb / 1e12:.2f} TB/s, {pf / 1e12:.0f} TFLOP/s)")
    for st, c in (("prefill", "C0"), ("decode", "C3")):
        ax.scatter(done[f"{st}_arith_intensity"], done[f"{st}_flop_s"], c=c, zorder=3,
                   label=f"{st} (analytic minimum bytes)")
        meas = f"{st}_arith_intensity_measured"  # ncu's DRAM bytes, where profiled
        if meas in done and done[meas].notna().any():
            ax.scatter(done[meas], done[f"{st}_flop_s"], facecolors="none", edgecolors=c,
                       zorder=3, label=f"{st} (ncu-measured bytes)")
    for _, row in done.iterrows():
        ax.annotate(design_label(row), (row["decode_arith_intensity"], row["decode_flop_s"]),
                    fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "roofline.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
