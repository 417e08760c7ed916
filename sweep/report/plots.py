"""Plots of a study: the Pareto front (PNG + interactive HTML) and the roofline (PNG)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..atomic import write_atomic
from .tables import design_label, pareto_mask


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
        paths.append(write_atomic(out_dir / "pareto.html",
                                  lambda p: figp.write_html(p, include_plotlyjs="cdn")))
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
