"""Plots of a study: the Pareto front (PNG + interactive HTML) and the roofline (PNG).

Both read as a person expects: axes in words with units (``sweep.report.labels``), a caption
with the device, workload and kernels/mode, error bars from the measured spread of the repeats
(min..p90), points numbered by trial with a key beside the plot (no overlapping labels), and
flagged rows (``noisy``) drawn hollow. The interactive page loads plotly.js from a file written
once into the folder above (``results/plotly.min.js``, shared by its studies), so it opens
without internet access.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..common import row as R
from ..common.atomic import write_atomic
from .labels import label, si, spread
from .tables import design_label, flag, pareto_mask


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only), matplotlib's own INFO lines (a
    fresh machine's font cache being built) kept off the study's console."""
    import logging

    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def caption(df: pd.DataFrame) -> str:
    """``device; batch B, prompt T, N new tokens; kernels K, mode M, KV dtype`` of a study's rows
    (each value as the rows hold it; several values joined with ``/``); for predicted rows
    ``PREDICTED on <target>`` in place of the device."""
    def vals(col):
        if col not in df:
            return "-"
        return "/".join(str(int(v) if isinstance(v, float) and v.is_integer() else v)  # 8, not
                        for v in pd.unique(df[col].dropna())) or "-"  # 8.0 (a queued row's NaN)

    predicted = flag(df, "predicted").any()
    where = f"PREDICTED on {vals('target')}" if predicted else vals("device")
    return (f"{where}; batch {vals('batch')}, prompt {vals('prompt_len')}, "
            f"{vals('new_tokens')} new tokens; kernels {vals('kernels')}, mode {vals('mode')}, "
            f"KV {vals('kv_dtype')}")


def _flagged(df: pd.DataFrame) -> pd.Series:
    out = pd.Series(False, index=df.index)
    for col in ("noisy", "decode_below_floor", "prefill_below_floor"):
        out |= flag(df, col)
    return out


def _num(i, r) -> int:
    """A trial's number (the row index where a table has no ``number`` column)."""
    n = r.get("number", i)
    return int(n) if pd.notna(n) else int(i)


LABELLED_MOST = 24  # beyond this many points, no numbers on them and no key: the HTML names them


def _key(ax, done: pd.DataFrame) -> None:
    """The numbered points' designs as a table to the right of the axes."""
    lines = [f"#{_num(i, r)}: {design_label(r)}" for i, r in done.iterrows()]
    if lines and len(lines) <= LABELLED_MOST:
        ax.text(1.02, 1.0, "\n".join(lines[:40]) + ("\n..." if len(lines) > 40 else ""),
                transform=ax.transAxes, va="top", ha="left", fontsize=7, family="monospace")


def pareto_plot(df: pd.DataFrame, objectives: list[str], directions: list[str], out_dir: Path,
                title: str = "") -> list[Path]:
    """Plot the completed trials in the plane of the first two objectives, Pareto front marked.

    Writes ``pareto.png`` (matplotlib) and ``pareto.html`` (plotly, with ``plotly.min.js`` above
    it). With one objective the second axis is ``params_non_embedding``. With three or more the
    front is the one over all of them (a design on it may look dominated in this plane), its
    points marked, not joined. Points are numbered with a key only up to ``LABELLED_MOST``;
    error bars (the spread of repeats) only for measured rows. Returns the paths.
    """
    plt = pyplot()

    out_dir.mkdir(parents=True, exist_ok=True)
    x_name = objectives[1] if len(objectives) > 1 else "params_non_embedding"
    y_name = objectives[0]
    dirs = [directions[1] if len(objectives) > 1 else "maximize", directions[0]]
    done = df[df.get("state", pd.Series(dtype=str)) == "COMPLETE"] if not df.empty else df
    def _vals(c):
        return done[c] if c in done else None

    (x_text, x_div), (y_text, y_div) = label(x_name, _vals(x_name)), label(y_name, _vals(y_name))
    paths = []
    fig, ax = plt.subplots(figsize=(10, 5.5))
    ok = not done.empty and {x_name, y_name} <= set(done.columns)
    if ok:
        pts = done[[x_name, y_name]].astype(float)
        every = [o for o in objectives if o in done] if len(objectives) > 2 else []
        front = (pareto_mask(done[every].astype(float), directions[:len(every)])
                 if len(every) > 2 and done[every].notna().all(axis=None) else
                 pareto_mask(pts, dirs))
        x, y = pts[x_name] / x_div, pts[y_name] / y_div
        flag = _flagged(done)
        ex, ey = spread(done, x_name), spread(done, y_name)
        if ex is not None or ey is not None:  # measured rows: the spread of their repeats
            ax.errorbar(x, y, xerr=None if ex is None else [ex[0] / x_div, ex[1] / x_div],
                        yerr=None if ey is None else [ey[0] / y_div, ey[1] / y_div], fmt="none",
                        ecolor="0.5", elinewidth=1, capsize=2,
                        label="spread of repeats (min..p90)")
        ax.scatter(x[~flag], y[~flag], c="0.45", zorder=3, label="designs")
        if flag.any():
            ax.scatter(x[flag], y[flag], facecolors="none", edgecolors="C1", zorder=3, s=60,
                       label="flagged (noisy: p90/min > 1.5)")
        f = pd.DataFrame({"x": x[front], "y": y[front]}).sort_values("x")
        if len(every) > 2:
            ax.scatter(f["x"], f["y"], c="C3", zorder=4, s=18,
                       label=f"Pareto front over all {len(every)} objectives ({len(f)})")
        else:
            ax.plot(f["x"], f["y"], "o-", c="C3", zorder=4, label="Pareto front")
        if len(done) <= LABELLED_MOST:
            for i, r in done.iterrows():
                ax.annotate(f"#{_num(i, r)}", (x[i], y[i]), fontsize=7,
                            textcoords="offset points", xytext=(5, 4 if _num(i, r) % 2 else -9))
        _key(ax, done)
    else:
        ax.text(0.5, 0.5, "no completed trials", ha="center", transform=ax.transAxes)
    ax.set_xlabel(f"{x_text} ({'higher' if dirs[0] == 'maximize' else 'lower'} is better)")
    ax.set_ylabel(f"{y_text} ({'higher' if dirs[1] == 'maximize' else 'lower'} is better)")
    ax.set_title(f"{title}\n{caption(df) if not df.empty else ''}", fontsize=8)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    png = out_dir / "pareto.png"
    write_atomic(png, lambda p: fig.savefig(p, dpi=120, format="png"))
    plt.close(fig)
    paths.append(png)
    try:
        import plotly.express as px
    except ImportError:
        return paths
    if ok:
        d = done.copy()
        on = front.reindex(d.index).fillna(False).astype(bool)
        d["point"] = ["on the Pareto front" if f else "dominated" for f in on]
        d["design"] = [design_label(r) for _, r in d.iterrows()]
        d[x_text], d[y_text] = d[x_name].astype(float) / x_div, d[y_name].astype(float) / y_div
        hover = ["number", "design"] + [c for c in (R.TIME["decode"], R.TIME["prefill"],
                                                    R.mbu("decode"), "noisy") if c in d]
        ex, ey = spread(d, x_name), spread(d, y_name)
        figp = px.scatter(d, x=x_text, y=y_text, color="point", hover_data=hover,
                          category_orders={"point": ["on the Pareto front", "dominated"]},
                          color_discrete_map={"on the Pareto front": "#d62728",
                                              "dominated": "#7f7f7f"},
                          labels={"point": ""},
                          error_x=None if ex is None else ex[1] / x_div,
                          error_x_minus=None if ex is None else ex[0] / x_div,
                          error_y=None if ey is None else ey[1] / y_div,
                          error_y_minus=None if ey is None else ey[0] / y_div,
                          title=f"{title}<br><sub>{caption(df)}</sub>")
        paths.append(write_html(figp, out_dir / "pareto.html"))
    return paths


def write_html(fig, path: Path, js_dir: Path | None = None) -> Path:
    """Write a plotly figure as a page that loads ``plotly.min.js`` from ``js_dir`` (written there
    once; default the folder above the page's: ``results/``, one copy of its 4.8 MB for every study
    there), so it opens offline; atomically. A tool given its own output folder passes that folder:
    nothing is written outside it."""
    import os

    js_dir = path.parent.parent if js_dir is None else Path(js_dir)
    js = js_dir / "plotly.min.js"
    if not js.exists():
        from plotly.offline import get_plotlyjs

        js_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(js, lambda p: p.write_text(get_plotlyjs()))
    src = Path(os.path.relpath(js, path.parent)).as_posix()
    return write_atomic(path, lambda p: fig.write_html(p, include_plotlyjs=src))


def roofline_plot(df: pd.DataFrame, out_dir: Path, title: str = "") -> Path | None:
    """Roofline of a study (Williams et al. 2009): each completed trial's prefill and decode as
    points at their arithmetic intensity (FLOP/byte; filled: analytic minimum bytes, hollow:
    bytes measured by Nsight Compute where the trial was profiled) and achieved FLOP/s, under the
    measured and datasheet ceilings (bandwidth slope, compute roof), numbered by trial with a key.
    Writes ``roofline.png``."""
    plt = pyplot()
    import numpy as np

    need = {"prefill_arith_intensity", "prefill_flop_s", "decode_arith_intensity", "decode_flop_s"}
    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    if done.empty or not need <= set(done.columns):
        return None
    fig, ax = plt.subplots(figsize=(10, 5.5))
    ai = np.logspace(-1, 4, 200)
    r = done.iloc[0]
    for which, style in (("measured", "-"), ("datasheet", "--")):
        pf, pb = r.get(f"peak_flops_{which}"), r.get(f"peak_bytes_s_{which}")
        if pf and pb and np.isfinite(pf) and np.isfinite(pb):
            ax.plot(ai, np.minimum(pf, pb * ai), style, c="k", lw=1,
                    label=f"{which} ceiling ({si(pb, 'B/s')}, {si(pf, 'FLOP/s')})")
    flag = _flagged(done)
    for st, c, m in (("prefill", "C0", "s"), ("decode", "C3", "o")):
        x, y = done[f"{st}_arith_intensity"], done[f"{st}_flop_s"]
        ax.scatter(x[~flag], y[~flag], c=c, marker=m, zorder=3,
                   label=f"{st} (analytic minimum bytes)")
        if flag.any():
            ax.scatter(x[flag], y[flag], facecolors="none", edgecolors=c, marker=m, s=70,
                       zorder=3, label=f"{st}, flagged noisy")
        pred = R.pred(st, "calibrated")  # the performance model's time, same FLOPs
        if pred in done and done[pred].notna().any():
            t_meas = done[R.TIME[st]].astype(float)
            ax.scatter(x, y * t_meas / done[pred].astype(float), marker="x", c=c, zorder=3,
                       label=f"{st} predicted (calibrated model)")
        meas = f"{st}_arith_intensity_measured"  # ncu's DRAM bytes, where profiled
        if meas in done and done[meas].notna().any():
            ax.scatter(done[meas], y, facecolors="none", edgecolors=c, marker="D",
                       zorder=3, label=f"{st} (ncu-measured bytes)")
        if len(done) > LABELLED_MOST // 2:
            continue  # too many points to number legibly: the key and labels stay off
        # a label beside its point, staggered by trial so neighbours do not print over each other
        order = done.sort_values(R.TIME[st]) if R.TIME[st] in done else done
        for k, (i, row) in enumerate(order.iterrows()):
            ax.annotate(f"{st[0]}{_num(i, row)}", (x[i], y[i]), fontsize=6,
                        textcoords="offset points",
                        xytext=(4, (3 + 7 * (k % 3)) * (1 if st == "decode" else -1)))
    if len(done) <= LABELLED_MOST // 2:
        _key(ax, done)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s (matmul FLOPs / stage time)")
    ax.set_title(f"{title}\n{caption(df)}; points p<n>: prefill, d<n>: decode of trial n",
                 fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = out_dir / "roofline.png"
    write_atomic(path, lambda p: fig.savefig(p, dpi=120, format="png"))
    plt.close(fig)
    return path
