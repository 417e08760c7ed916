"""One self-contained HTML report per study: ``results/<study>/report.html``.

Sections: the hardware and software used (the peaks as a table of datasheet and measured values
with units), the design space (base model, space, constraints, objectives, workload), the Pareto
front (plot and its designs), the roofline, the per-stage bottleneck classes and diagnosis texts,
the trials table (a chosen set of columns in a scrolling box; every column in ``trials.csv``), and
how to open the study in ``optuna-dashboard``. Plots are embedded (base64 PNG) and the page loads
nothing from the network, so it can be mailed or committed as is. Written by every study run;
``python -m sweep.report.html_report STUDY_DIR`` rewrites it.
"""

from __future__ import annotations

import base64
import html
import math
import sys
from pathlib import Path

import pandas as pd

from ..common import row as R
from ..common.atomic import write_text
from .labels import fmt, si
from .plots import caption
from .tables import flag, front_rows, load_study, shown

TABLE_COLUMNS = list(R.REPORT)
PRED_COLUMNS = list(R.REPORT_PREDICTED)
STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{border:1px solid #ccc;"
         "padding:2px 6px;text-align:left;vertical-align:top}img{max-width:100%}"
         ".scroll{overflow-x:auto;max-width:100%;max-height:32em;overflow-y:auto;"
         "border:1px solid #eee}.note{color:#555;font-size:12px}")


def _img(path: Path) -> str:
    if not path.exists():
        return "<p><em>(not drawn: no completed trials with these figures)</em></p>"
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.name)}" src="data:image/png;base64,{data}">'


def _text(v) -> str:
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_text(x)}" for k, x in v.items()) or "none"
    if isinstance(v, list):
        return ", ".join(_text(x) for x in v)
    return fmt(v)


def _kv_table(d: dict) -> str:
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_text(v))}</td></tr>"
                   for k, v in d.items() if _text(v) != "")
    return f"<div class='scroll'><table>{rows}</table></div>"


NOT_MEASURED = "@@NA@@"  # a missing figure's cell, before it is written as n/a with its hint


def _frame(df: pd.DataFrame, most: int = 160) -> str:
    """A table in a box that scrolls sideways (never cut at the page's edge); a long text cell
    (notes, reasons) shown to ``most`` characters, the whole of it on hover, so no row grows tall
    for a column off screen."""
    df = df.copy()
    cut: list[str] = []

    def short(v):
        if isinstance(v, str) and len(v) > most:
            cut.append(v)
            return f"@@CUT{len(cut) - 1}@@"
        return v

    from zoo.config import DESIGN_FIELDS

    design = [c for c in df.columns if c.removeprefix("param_") in DESIGN_FIELDS]
    figures = [c for c in df.columns if (c in R.COLUMNS or df[c].dtype.kind in "fi")
               and c not in design]
    def design_value(v):  # a design field unset (no sliding window, no MoE): "none", not "n/a"
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            return "none"
        if isinstance(v, float) and v.is_integer():
            v = int(v)  # a whole count read back as a float beside a missing value
        return fmt(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    for c in design:
        df[c] = df[c].map(design_value).astype(object)
    for c in df.columns:
        if c in figures and df[c].isna().any():  # a figure not measured: n/a, never "None" or 0
            df[c] = df[c].map(lambda v: NOT_MEASURED if pd.isna(v) else v).astype(object)
        elif df[c].dtype == object or pd.api.types.is_string_dtype(df[c]):
            df[c] = df[c].map(short).astype(object)
    body = df.to_html(index=False, na_rep="", border=0, escape=True, formatters={
        c: (lambda v: v if v == NOT_MEASURED else fmt(v)) for c in figures})
    body = body.replace(NOT_MEASURED, '<span title="not measured here: the trials.csv column '
                                      'of the same name + _reason says why">n/a</span>')
    for i, v in enumerate(cut):
        body = body.replace(f"@@CUT{i}@@", f"<span title='{html.escape(v, quote=True)}'>"
                                          f"{html.escape(v[:most])} ...</span>")
    return f"<div class='scroll'>{body}</div>"


def peaks_table(spec: dict, ceil: dict) -> str:
    """Datasheet and measured peaks side by side, with units; rows with neither left out."""
    def nan(v):
        return v is None or (isinstance(v, float) and math.isnan(v))

    rows = [("DRAM bandwidth", si(float(spec.get("hbm_gb_s") or math.nan) * 1e9, "B/s"),
             si(ceil.get("copy_bytes_s", math.nan), "B/s"), ceil.get("method", {}).get("copy", ""))]
    for dt, tf in (spec.get("peak_tflops") or {}).items():
        meas = ceil.get(f"gemm_flops_{dt}", math.nan)
        if nan(tf) and nan(meas):
            continue
        rows.append((f"dense {dt} matmul", si(float(tf) * 1e12, "FLOP/s") if not nan(tf) else "",
                     si(meas, "FLOP/s"), ceil.get("method", {}).get(f"gemm_{dt}", "")))
    for key, what, unit, scale in (("memory_gb", "memory", "B", 1e9), ("l2_mb", "L2 cache", "B", 1e6),
                                   ("tdp_w", "TDP", "W", 1), ("sm_count", "SMs", "", 1)):
        v = spec.get(key)
        if not nan(v) and v:
            rows.append((what, si(float(v) * scale, unit) if unit else fmt(v), "", ""))
    body = "".join(f"<tr><th>{html.escape(a)}</th><td>{html.escape(b)}</td><td>{html.escape(c)}"
                   f"</td><td class='note'>{html.escape(d)}</td></tr>" for a, b, c, d in rows)
    src, name = html.escape(str(spec.get("source", ""))), html.escape(str(spec.get("name", "")))
    measured = "measured on this device" if ceil else "measured (none: nothing was measured)"
    return (f"<div class='scroll'><table><tr><th></th><th>datasheet ({name})"
            f"</th><th>{measured}</th><th>how measured</th></tr>{body}</table></div>"
            f"<p class='note'>datasheet source: {src}</p>")


def ceilings_note(df: pd.DataFrame) -> str:
    """A note where the study's rows were measured against different copy ceilings (a study
    resumed after its device's ceilings were measured again: the table above shows the last);
    each row's MBU is against its own (``peak_bytes_s_measured``); else ``""``."""
    if "peak_bytes_s_measured" not in df:
        return ""
    v = pd.to_numeric(df["peak_bytes_s_measured"], errors="coerce").dropna()
    if v.empty or v.max() <= v.min() * 1.02:
        return ""
    return (f"<p class='note'>The rows were measured against {v.round(-6).nunique()} different "
            f"copy ceilings, {v.min() / 1e9:.3g} to {v.max() / 1e9:.3g} GB/s (the study was "
            "resumed after the device's ceilings were measured again; the table shows the last): "
            "each row's MBU is against its own (<code>peak_bytes_s_measured</code>), so MBU "
            "compares across these rows only as far as the ceilings agree.</p>")


def best_on_front(front: pd.DataFrame, objective: str, direction: str) -> pd.Series:
    """The row of ``front`` best in ``objective`` (``direction``: ``maximize`` or
    ``minimize``); a row without the figure comes last. The front is in trial order, so its
    first row is any design of it."""
    if objective not in front:
        return front.iloc[0]
    v = pd.to_numeric(front[objective], errors="coerce")
    return front.loc[(v.idxmax() if direction == "maximize" else v.idxmin())
                     if v.notna().any() else front.index[0]]


def advice(meta: dict, front: pd.DataFrame, cal_dir: Path | None = None) -> str:
    """The design advisor's section (``sweep.analysis.advice``) for the front's design best in
    the first objective (``best_on_front``) on the study's hardware spec, priced from the study
    device's calibration where one is cached in ``cal_dir`` (else the what-if's prices, said
    so). Its rules are the GPU's (tensor cores, tiles, waves): a study on a CPU spec gets none."""
    from ..analysis.advice import advise_study_row

    if front.empty:
        return "<p>no completed design to advise on</p>"
    if (meta.get("hardware_spec") or {}).get("kind", "gpu") != "gpu":
        return ("<p class='note'>The advisor's rules are a GPU's (tensor-core alignment, tile and "
                "wave quantization): not applied to this run on "
                f"{html.escape(str(meta['hardware_spec'].get('name')))}. "
                "<code>python -m sweep.cli.advise ... hardware=h100_sxm</code> applies them to a "
                "design on a GPU.</p>")
    try:
        row = best_on_front(front, meta["objectives"][0], meta["directions"][0])
        r = advise_study_row(meta, row, cal_dir)
    except Exception as e:  # the report is written whatever the advisor makes of the row
        return f"<p>no advice: {html.escape(f'{type(e).__name__}: {e}')}</p>"
    items = "".join(f"<li><code>{html.escape(f['field'])}</code> = {f['value']} "
                    f"({html.escape(f['rule'])}): {html.escape(f['detail'])}</li>"
                    for f in r["findings"]) or "<li>none: every alignment rule holds</li>"
    alts = pd.DataFrame([{"alternative": a["label"] + (" (*: priced by stand-ins)"
                                                       if a.get("stand_ins") else ""),
                          "params change %": round(a["params_change_pct"], 1),
                          "TTFT gain %": round(a["prefill_gain_pct"], 1),
                          "TPOT gain %": round(a["decode_gain_pct"], 1),
                          "targets": a["target_stage"]} for a in r["alternatives"]])
    label = ", ".join(f"{c[6:]}={row[c]}" for c in front.columns
                      if c.startswith("param_") and pd.notna(row[c])) or "the base design"
    return (f"<p class='note'>For {html.escape(label)} (best {html.escape(meta['objectives'][0])} "
            f"on the front) on {html.escape(r['target'])}; prices: {html.escape(r['basis'])}. "
            "Alternatives within +-3% non-embedding parameters and the same KV bytes/token; "
            "<code>python -m sweep.cli.advise</code> gives more.</p>"
            f"<ul>{items}</ul>"
            + (_frame(alts) if not alts.empty else
               "<p>no alternative predicted faster within the band</p>"))


def predicted_only(done: pd.DataFrame, params: list[str], spec: dict) -> list[str]:
    """A predict-only study's section: its designs' predicted figures and their basis, said to
    be predictions (no "measured" column and no error against a measurement that was never
    made)."""
    cols = ["number", *params, R.TIME["prefill"], R.TIME["decode"], R.RATE["decode"],
            "basis_kind", "prediction_basis"]
    return ["<h2>Predicted (nothing measured)</h2>",
            f"<p class='note'>Every figure of this study is the performance model's "
            f"(sweep.analysis.predict) on {html.escape(str(spec.get('name', '')))}; its basis "
            "says what it rests on.</p>",
            _frame(done[[c for c in cols if c in done.columns]]) if not done.empty
            else "<p>no designs priced</p>"]


def write_report(study_dir: str | Path) -> Path:
    """Write ``<study_dir>/report.html`` from ``study.json``, ``trials.parquet`` and the plots
    beside them; returns its path.

    Raises:
        FileNotFoundError: ``study.json`` or ``trials.parquet`` missing (not a study folder).
    """
    d = Path(study_dir)
    meta, df = load_study(d)
    objs, dirs = meta["objectives"], meta["directions"]
    env, spec, ceil = meta.get("env", {}), meta.get("hardware_spec", {}), meta.get("ceilings", {})
    cut = flag(df, "interrupted")  # cut off and queued again (``tables.cut_off``): no design
    states = df[~cut]["state"].value_counts().to_dict() if "state" in df else {}
    params = [c for c in df.columns if c.startswith("param_")]
    cols = ["number"] + params + [c for c in TABLE_COLUMNS if c in df.columns and c != "number"]
    front = front_rows(df, objs, dirs)
    diag_cols = ["number"] + params + [c for c in ("prefill_bound", "decode_bound",
                                                   "decode_bound_evidence", "diagnosis")
                                       if c in df.columns]
    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    failed = df[df["state"] != "COMPLETE"] if "state" in df else df.iloc[0:0]
    storage = meta.get("storage", "")
    parts = [
        f"<h1>{html.escape(meta['study'])}</h1>",
        f"<p>experiment <b>{html.escape(str(meta.get('experiment')))}</b>; {int((~cut).sum())} "
        "designs (" + ", ".join(f"{v} {k.lower()}" for k, v in states.items()) + ")"
        + (f"; {int(cut.sum())} trial(s) interrupted, their designs queued again" if cut.any()
           else "") + "; objectives "
        + ", ".join(f"{o} ({dd})" for o, dd in zip(objs, dirs)) + "</p>",
        f"<p class='note'>{html.escape(caption(df)) if not df.empty else ''}</p>",
        *predicted_sections(d),
        "<h2>Hardware and software</h2>",
        _kv_table({k: env.get(k) for k in ("device", "torch", "triton", "cuda", "driver",
                                           "python", "git_sha", "timestamp") if k in env}),
        "<h3>Peaks</h3>", peaks_table(spec, ceil), ceilings_note(df),
        "<h2>Design space</h2>",
        _kv_table({"space": meta.get("space"), "constraints": meta.get("constraints") or {},
                   "workload": meta.get("workload"), "decode mode": meta.get("mode"),
                   "workers": meta.get("workers", 1)}),
        "<h3>Base model</h3>", _kv_table(meta.get("base_model", {})),
        "<h2>Pareto front</h2>", _img(d / "pareto.png"),
        '<p>Interactive: <a href="pareto.html">pareto.html</a></p>',
        _frame(front[[c for c in cols if c in front.columns]]) if not front.empty
        else "<p>no completed trials</p>",
        "<h2>Roofline</h2>", _img(d / "roofline.png"),
        *(predicted_only(done, params, spec) if meta.get("predict") else [
            "<h2>Predicted and measured</h2>",
            "<p class='note'>The performance model (sweep.analysis.predict): calibrated on "
            "kernel micro-benchmarks, never on these measurements; roofline-only beside it. "
            "Errors are signed, prediction vs measurement.</p>",
            _frame(done[[c for c in ["number"] + params + PRED_COLUMNS if c in done.columns]])
            if not done.empty and R.pred("decode", "calibrated") in done else
            "<p>no predictions in this study</p>"]),
        "<h2>Bottlenecks and diagnosis</h2>",
        _frame(done[[c for c in diag_cols if c in done.columns]]) if not done.empty else "",
        "<h2>Design advice</h2>", advice(meta, front, Path(study_dir).parent / "calibration"),
        "<h2>Trials</h2>", _frame(df[[c for c in cols if c in df.columns]]),
        '<p>Every column: <a href="trials.csv">trials.csv</a> / trials.parquet.</p>',
    ]
    if not failed.empty:
        parts += ["<h3>Failed and pruned designs</h3>",
                  _frame(failed[[c for c in ["number", "state"] + params + ["fail_reason"]
                                 if c in failed.columns]])]
    parts += ["<h2>Open in optuna-dashboard</h2>",
              f"<pre>pip install optuna-dashboard\noptuna-dashboard {html.escape(storage)}</pre>",
              "<p>Each trial's figures are its user attributes (the column names above).</p>"]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(meta['study'])}"
            f"</title><style>{STYLE}</style></head><body>{''.join(parts)}</body></html>")
    return write_text(d / "report.html", page)


def predicted_sections(d: Path) -> list[str]:
    """The real designs of a study run without a GPU, priced on each GPU of ``cpu.predict_on``
    (``predicted_<target>.csv`` beside the trials): a heading and a table per target, first in
    the report, since they are such a study's answer; none for a study that wrote no such file."""
    files = sorted(d.glob("predicted_*.csv"))
    if not files:
        return []
    out = ["<h2>The real designs, predicted</h2>",
           "<p class='note'>No GPU ran this study: the tiny model's rows below measure the "
           "study's mechanics. The experiment's real designs are priced on each GPU from the "
           "calibration shipped for it (sweep.analysis.predict): predicted, never measured "
           "here; each row says its basis.</p>"]
    for f in files:
        t = pd.read_csv(f)
        cols = [c for c in R.PREDICTED_SUMMARY if c in t.columns and
                (c not in R.PREDICTED_DESIGN or t[c].nunique() > 1)
                and shown(c, t)]
        out += [f"<h3>{html.escape(f.stem.removeprefix('predicted_'))} ({len(t)} designs, "
                f"<a href='{html.escape(f.name)}'>{html.escape(f.name)}</a>)</h3>",
                _frame(t[cols])]
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m sweep.report.html_report",
        description="Rewrite report.html of each study folder from its study.json and "
                    "trials.parquet (written by python -m sweep).")
    ap.add_argument("studies", nargs="+", metavar="STUDY_DIR", help="results/<study> folders")
    a = ap.parse_args(argv)
    for s in a.studies:
        try:
            print(write_report(s))
        except FileNotFoundError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    from ..common.entry import entry

    sys.exit(entry(main))
