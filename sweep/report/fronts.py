"""Compare the Pareto fronts of several studies: ``python -m sweep.cli.compare_fronts STUDY_DIR...``.

Each STUDY_DIR is a study folder (``trials.parquet`` + ``study.json``). The fronts are taken over
common objectives (``--objectives name:max name:min ...``; default: the first study's, which every
study must have as columns) and compared three ways:

- an overlay plot of every study's designs and front (``fronts.png``, interactive ``fronts.html``);
- the hypervolume of each front (the objective-space volume it dominates, Zitzler & Thiele 1998)
  against one reference point common to all studies: per objective the worst value seen in any
  study, pushed 10% of the range further (computed with Optuna's WFG implementation); also as a
  fraction of the box between the ideal point and the reference, so studies compare at a glance;
- a dominance table: every front design with the designs of *other* studies that dominate it,
  and whether it is on the combined front of all studies.

Outputs go to ``--out`` (default ``fronts/<experiments>`` beside the first study, in its
``results_dir``): ``fronts.png``, ``fronts.html`` (with its ``plotly.min.js``: nothing is written
outside the folder), ``fronts.csv`` (the dominance table) and
``fronts.json`` (hypervolumes,
reference point, studies, devices, workloads). A warning is printed (and kept in the JSON) when
the studies ran on different devices or workloads.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..common.atomic import write_atomic, write_text
from ..common.env import slug
from ..common.row import CONTENDED
from .labels import label as words
from .plots import pyplot, write_html
from .tables import design_label, front_rows, load_study, named_twice


def hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """Hypervolume dominated by ``points`` ``[n, m]`` (minimization) up to ``ref`` ``[m]``.

    Uses Optuna's WFG implementation (``optuna._hypervolume``, an internal module) and falls
    back to an exact 2-D sweep if that import fails. Points not strictly better than ``ref`` in
    every objective add nothing.
    """
    pts = points[(points < ref).all(axis=1)]
    if len(pts) == 0:
        return 0.0
    try:
        from optuna._hypervolume import compute_hypervolume

        return float(compute_hypervolume(pts, ref))
    except ImportError:  # pragma: no cover - only without optuna's internal module
        if pts.shape[1] != 2:
            raise
        pts = pts[np.argsort(pts[:, 0])]
        hv, best_y = 0.0, ref[1]
        for x, y in pts:
            if y < best_y:
                hv += (ref[0] - x) * (best_y - y)
                best_y = y
        return hv


def compare(studies: list[tuple[str, dict, pd.DataFrame]], objectives: list[str],
            directions: list[str]) -> tuple[pd.DataFrame, dict]:
    """The dominance table and the summary for ``studies`` (``(label, meta, trials)`` each).

    Returns:
        ``(table, summary)``: the table has one row per front design (``study``, ``design``, the
        objectives, ``on_combined_front``, ``dominated_by``); the summary has ``reference_point``,
        ``ideal_point``, ``hypervolume`` and ``hypervolume_fraction`` per study, ``front_size``,
        ``objectives``, ``directions``, and ``warnings``.

    Raises:
        ValueError: a study lacks an objective column or never measured it (the row's
            ``_reason`` is quoted), or no study has a completed design.
    """
    sign = np.array([-1.0 if d == "maximize" else 1.0 for d in directions])  # to minimization
    pts: dict[str, pd.DataFrame] = {}
    for label, _, df in studies:
        missing = [o for o in objectives if o not in df.columns or df[o].isna().all()]
        if missing:
            why = "; ".join(f"{o}: {df[o + '_reason'].dropna().iloc[0]}" for o in missing
                            if o + "_reason" in df and df[o + "_reason"].notna().any())
            raise ValueError(f"study {label!r} has no column(s) {missing} with a measured value"
                             + (f" ({why})" if why else "")
                             + "; pass --objectives that every study measured")
        done = df[df["state"] == "COMPLETE"].copy()
        done = done[done[objectives].astype(float).notna().all(axis=1)]
        done["design"] = [design_label(r) for _, r in done.iterrows()]
        pts[label] = done
    allv = [d[objectives].to_numpy(float) * sign for d in pts.values() if len(d)]
    if not allv:
        raise ValueError("no study has a completed design with every objective measured")
    allv = np.vstack(allv)
    worst, ideal = allv.max(axis=0), allv.min(axis=0)
    span = np.where(worst > ideal, worst - ideal, np.abs(worst) + 1.0)
    ref = worst + 0.1 * span
    box = float(np.prod(ref - ideal))
    rows, summary = [], {"objectives": objectives, "directions": directions,
                         "reference_point": (ref * sign).tolist(),
                         "ideal_point": (ideal * sign).tolist(), "studies": {}}
    fronts = {}
    for label, d in pts.items():
        if d.empty:
            fronts[label] = d
            summary["studies"][label] = {"front_size": 0, "hypervolume": 0.0,
                                         "hypervolume_fraction": 0.0, "designs": int(len(d))}
            continue
        f = front_rows(d, objectives, directions)
        fronts[label] = f
        hv = hypervolume(f[objectives].to_numpy(float) * sign, ref)
        summary["studies"][label] = {"front_size": int(len(f)), "hypervolume": hv,
                                     "hypervolume_fraction": hv / box if box > 0 else math.nan,
                                     "designs": int(len(d))}
    union = pd.concat([f.assign(study=lab) for lab, f in fronts.items() if len(f)],
                      ignore_index=True)
    uv = union[objectives].to_numpy(float) * sign
    itself = []  # (i, j): front design i dominated by the same design j of another study
    for i, r in union.iterrows():
        dom = [j for j in range(len(union)) if union.at[j, "study"] != r["study"]
               and (uv[j] <= uv[i]).all() and (uv[j] < uv[i]).any()]
        itself += [(i, j) for j in dom if union.at[j, "design"] == r["design"]]
        on_combined = not any((uv[j] <= uv[i]).all() and (uv[j] < uv[i]).any()
                              for j in range(len(union)) if j != i)
        rows.append({"study": r["study"], "design": r["design"],
                     **{o: float(r[o]) for o in objectives},
                     "on_combined_front": on_combined,
                     CONTENDED: bool(r.get(CONTENDED) is True or r.get(CONTENDED) == "True"),
                     "dominated_by": "; ".join(f"{union.at[j, 'study']}: {union.at[j, 'design']}"
                                               for j in dom)})
    table = pd.DataFrame(rows)
    for lab in summary["studies"]:
        sub = table[table["study"] == lab] if len(table) else table
        summary["studies"][lab]["on_combined_front"] = int(sub["on_combined_front"].sum()) \
            if len(sub) else 0
    devices = {lab: _where(m) for lab, m, _ in studies}
    workloads = {lab: json.dumps(m.get("workload"), sort_keys=True) for lab, m, _ in studies}
    warnings = []
    if len(set(devices.values())) > 1:
        warnings.append(f"studies ran on different devices: {devices}")
    if len(set(workloads.values())) > 1:
        warnings.append("studies ran different workloads: " + "; ".join(
            f"{k}: {v}" for k, v in workloads.items()))
    shared = table[table[CONTENDED]] if len(table) else table
    if len(shared):
        warnings.append(f"{len(shared)} front design(s) measured while another process used the "
                        "device (contended: their figures are another job's too; measure them "
                        "again): " + "; ".join(f"{r.study}: {r.design}"
                                               for r in shared.itertuples()))
    for i, j in itself:  # one design, two measurements (or two devices' figures)
        a, b = union.loc[i], union.loc[j]
        if devices.get(a.study) != devices.get(b.study) or workloads.get(a.study) != \
                workloads.get(b.study):  # apart by the device or the workload, as warned above
            continue
        apart = ", ".join(f"{c} {100 * (float(b[c]) / float(a[c]) - 1):+.1f}%" for c in objectives
                          if a[c])
        warnings.append(f"{a.study}: {a.design} is dominated by the same design in {b.study} "
                        f"({apart}): one design measured twice, apart by run-to-run spread or the "
                        "machine's state, not by its design (sweep.cli.compare judges the two "
                        "against their spread)")
    summary["warnings"] = warnings
    summary["devices"] = devices
    return table, summary


def _where(meta: dict) -> str | None:
    """The device a study's figures are of: the measured one, or for a predict-only study the
    hardware spec it priced (every such study's device reads "predicted (no device)")."""
    if meta.get("predict"):
        return f"predicted on {(meta.get('hardware_spec') or {}).get('name')}"
    return (meta.get("env") or {}).get("device")


def plot(studies: list[tuple[str, dict, pd.DataFrame]], table: pd.DataFrame, objectives: list[str],
         directions: list[str], out: Path, title: str | None = None) -> list[Path]:
    """Overlay of every study's designs (small) and front (line) in the plane of the first two
    objectives: ``fronts.png`` and, with plotly, ``fronts.html``, both titled ``title`` (what is
    compared, the workload, measured or predicted; default: the studies' names)."""
    plt = pyplot()

    x, y = (objectives[1], objectives[0]) if len(objectives) > 1 else (objectives[0],) * 2
    every = pd.concat([df for _, _, df in studies], ignore_index=True)
    # axes in words with units (chosen from the data's size), values scaled to them
    (xt, xd), (yt, yd) = (words(c, every[c] if c in every else None) for c in (x, y))
    fig, ax = plt.subplots(figsize=(8, 5.5))
    colors = plt.get_cmap("tab20").colors if len(studies) > 10 else [f"C{k}" for k in range(10)]
    for k, (name, _, df) in enumerate(studies):
        c = colors[k % len(colors)]
        done = df[df["state"] == "COMPLETE"]
        ax.scatter(done[x] / xd, done[y] / yd, s=14, color=c, alpha=0.4)
        f = table[table["study"] == name].sort_values(x)
        ax.plot(f[x] / xd, f[y] / yd, "o-", c=c, label=f"{name} front")
        for _, r in f.iterrows():
            ax.annotate(r["design"], (r[x] / xd, r[y] / yd), fontsize=6,
                        textcoords="offset points", xytext=(3, 3))
    dx = directions[1] if len(objectives) > 1 else directions[0]
    better = {"maximize": "higher is better", "minimize": "lower is better"}
    ax.set_xlabel(f"{xt} ({better[dx]})")
    ax.set_ylabel(f"{yt} ({better[directions[0]]})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    names = ", ".join(s[0] for s in studies)
    title = title or "Pareto fronts: " + (names if len(names) <= 100 else
                                          f"{len(studies)} studies (legend)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    png = out / "fronts.png"
    write_atomic(png, lambda p: fig.savefig(p, dpi=120, format="png"))
    plt.close(fig)
    paths = [png]
    try:
        import plotly.graph_objects as go
    except ImportError:
        return paths
    figp = go.Figure()
    for name, _, df in studies:
        done = df[df["state"] == "COMPLETE"]
        figp.add_scatter(x=done[x] / xd, y=done[y] / yd, mode="markers", name=f"{name} designs",
                         text=[design_label(r) for _, r in done.iterrows()], opacity=0.5)
        f = table[table["study"] == name].sort_values(x)
        figp.add_scatter(x=f[x] / xd, y=f[y] / yd, mode="lines+markers", name=f"{name} front",
                         text=f["design"])
    figp.update_layout(xaxis_title=xt, yaxis_title=yt, title=title)
    return paths + [write_html(figp, out / "fronts.html", js_dir=out)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="+", help="study folders (results/<study>)")
    ap.add_argument("--objectives", nargs="+", metavar="NAME:max|min",
                    help="common objectives (default: the first study's)")
    ap.add_argument("--out", help="output folder (default fronts/<experiments> beside the first "
                    "study)")
    a = ap.parse_args(argv)
    if twice := named_twice(a.studies):
        print(f"error: {twice}: a study folder named twice (its front would be compared with "
              "itself)", file=sys.stderr)
        return 2
    try:
        loaded = [(Path(s), *load_study(s)) for s in a.studies]
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    labels = [m.get("experiment") or p.name for p, m, _ in loaded]
    for names in ([p.name for p, _, _ in loaded],  # a label each study keeps apart
                  [f"{p.resolve().parent.name}/{p.name}" for p, _, _ in loaded],
                  [f"{i + 1}:{p.name}" for i, (p, _, _) in enumerate(loaded)]):
        if len(set(labels)) == len(labels):
            break
        labels = names
    studies = [(lab, m, df) for lab, (_, m, df) in zip(labels, loaded)]
    if a.objectives:
        try:
            objectives = [o.split(":")[0] for o in a.objectives]
            directions = [{"max": "maximize", "min": "minimize"}[o.split(":")[1]]
                          for o in a.objectives]
        except (IndexError, KeyError):
            print("error: --objectives takes NAME:max or NAME:min", file=sys.stderr)
            return 2
    else:
        objectives, directions = loaded[0][1]["objectives"], loaded[0][1]["directions"]
        others = {tuple(m["objectives"]) for _, m, _ in loaded[1:]} - {tuple(objectives)}
        print(f"objectives: the first study's ({', '.join(objectives)})"
              + (f"; the others optimized {sorted(others)}" if others else "")
              + "; --objectives NAME:max|min ... chooses others", flush=True)
    try:
        table, summary = compare(studies, objectives, directions)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import hashlib

    inputs = {"study_dirs": [str(p.resolve()) for p, _, _ in loaded], "objectives": objectives,
              "directions": directions}
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:8]
    out = Path(a.out) if a.out else (  # beside the first study, in its results_dir
        loaded[0][0].resolve().parent / "fronts" / f"{slug('-vs-'.join(labels))[:80]}-{key}")
    prev = out / "fronts.json"
    if prev.exists():  # another comparison's outputs are never overwritten
        try:
            old = json.loads(prev.read_text())
        except ValueError:
            old = None
        if not isinstance(old, dict) or {k: old.get(k) for k in inputs} != inputs:
            whose = old.get("study_dirs") if isinstance(old, dict) else "not a comparison's"
            print(f"error: {out} holds another comparison's fronts.json ({whose}); --out names "
                  "another folder", file=sys.stderr)
            return 2
    out.mkdir(parents=True, exist_ok=True)
    wl = {json.dumps(m.get("workload", {}).get(k)) for _, m, _ in loaded for k in ("batch",)}
    what = "predicted" if any(bool(df.get("predicted", pd.Series([False])).any())
                              for _, _, df in loaded) else "measured"
    plot(studies, table, objectives, directions, out,
         title=f"Pareto fronts ({what}): {', '.join(labels)[:90]}"
               + (f"; batch {'/'.join(sorted(wl))}" if wl else ""))
    write_atomic(out / "fronts.csv", lambda p: table.to_csv(p, index=False))
    summary.update(inputs)
    write_text(out / "fronts.json", json.dumps(summary, indent=1))
    for w in summary["warnings"]:
        print(f"warning: {w}")
    print(f"objectives: {', '.join(f'{o} ({d})' for o, d in zip(objectives, directions))}; "
          "reference point [" + ", ".join(f"{v:.4g}" for v in summary["reference_point"]) + "]")
    hv = pd.DataFrame([{"study": k, **v} for k, v in summary["studies"].items()])
    print(hv.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print()
    with pd.option_context("display.max_colwidth", 80, "display.width", 200):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\nwrote {out}/fronts.png, fronts.html, fronts.csv, fronts.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
