"""Chips we do not have, priced from the world's measurements: a dataset of published LLM
inference figures, per-family efficiencies fitted on it, and their check on chips left out.

The dataset (``conf/public/measurements.csv``, one row per published figure: chip, engine, model,
weight format and bits per weight, batch, prompt, context, the figure, its source) maps each
model to a zoo design (``conf/public/models.yaml``: the shape of its published ``config.json``)
and each chip to its datasheet (``conf/public/chips.csv``: memory bandwidth, fp16 peak, sources).

The model of a chip ``c`` of a family ``f`` (a kind of chip and the engine that ran it:
``apple-gpu/llama.cpp``, ``nvidia-gpu/vllm``, ...), with the design's bytes and FLOPs from
``zoo.counts`` (weights at the row's bits per weight)::

    decode step (s)  = t_f + bytes / (bandwidth_c x b_f)       # b_f: achieved fraction
    prefill (s)      = p_f + FLOPs / (peak_c x c_f)            # c_f: achieved fraction

``(t_f, 1/b_f)`` and ``(p_f, 1/c_f)`` are least-squares fits with relative weights on the
family's rows (``fit``). ``check`` prices every row with parameters fitted without its chip
(leave-one-chip-out; a family left with no other chip takes the fit over every family of its
engine, then over all rows) and, for the chips of one line of several generations, trains on the
older and tests the newest. Beside them the same rows are priced by a pure datasheet roofline and
by each spec's assumed efficiencies, so the gain is visible.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..common import row as R
from ..common.env import REPO

DATA = REPO / "conf" / "public"
# the published figures a row may hold: per-sequence rates (tokens/s) and per-token times (ms)
DECODE_FIGURES = (R.RATE["decode"], "tpot_ms")
PREFILL_FIGURES = (R.RATE["prefill"], R.TIME["prefill"])
FIGURES = {R.RATE["decode"]: "tokens/s", R.RATE["prefill"]: "tokens/s", R.TIME["prefill"]: "ms",
           "tpot_ms": "ms"}
REQUIRED = ("chip", "vendor", "engine", "model", "weight_format", "bits_per_weight", "batch",
            "prompt_len", "context", "figure", "value", "unit", "source", "source_date")


@dataclass
class Row:
    """One published figure, with what the model needs of it."""

    chip: str
    family: str
    engine: str
    model: str
    bits: float
    batch: int
    prompt_len: int
    context: int
    figure: str
    value: float
    source: str
    raw: dict


def load(path: Path | None = None) -> tuple[list[Row], dict, dict]:
    """``(rows, chips, models)``: the dataset checked (required fields, a source on every row,
    units matching the figure, numbers positive), the chips' datasheets and the models' shapes.

    Raises:
        ValueError: a row that fails a check (its line and the field named).
    """
    import yaml

    d = path or DATA
    chips = {r["chip"]: r for r in csv.DictReader(open(d / "chips.csv"))}
    models = yaml.safe_load((d / "models.yaml").read_text())
    rows = []
    for i, r in enumerate(csv.DictReader(open(d / "measurements.csv")), start=2):
        missing = [k for k in REQUIRED if not str(r.get(k, "")).strip()]
        if missing:
            raise ValueError(f"measurements.csv line {i}: no {', '.join(missing)}")
        if r["figure"] not in FIGURES:
            raise ValueError(f"measurements.csv line {i}: figure {r['figure']!r} is not one of "
                             f"{', '.join(FIGURES)}")
        if r["unit"] != FIGURES[r["figure"]]:
            raise ValueError(f"measurements.csv line {i}: {r['figure']} in {r['unit']!r}, "
                             f"expected {FIGURES[r['figure']]!r}")
        if r["chip"] not in chips:
            raise ValueError(f"measurements.csv line {i}: chip {r['chip']!r} not in chips.csv")
        if r["model"] not in models:
            raise ValueError(f"measurements.csv line {i}: model {r['model']!r} not in models.yaml")
        try:
            nums = [float(r[k]) for k in ("value", "bits_per_weight", "batch", "prompt_len",
                                          "context")]
        except ValueError as e:
            raise ValueError(f"measurements.csv line {i}: {e}") from None
        if nums[0] <= 0 or nums[1] <= 0 or nums[2] < 1:
            raise ValueError(f"measurements.csv line {i}: value, bits and batch must be positive")
        kind = chips[r["chip"]].get("kind", "gpu")
        rows.append(Row(chip=r["chip"], family=f"{r['vendor'].lower()}-{kind}/{r['engine']}",
                        engine=r["engine"], model=r["model"], bits=nums[1], batch=int(nums[2]),
                        prompt_len=int(nums[3]), context=int(nums[4]), figure=r["figure"],
                        value=nums[0], source=r["source"], raw=r))
    return rows, chips, models


def design(model: dict, bits: float):
    """The zoo design of a ``models.yaml`` entry: a shipped preset (``preset``) or the fields of
    its published config.json; weights at ``bits`` per weight (the nearest named format)."""
    from zoo import ModelConfig
    from zoo.formats import WEIGHT_FORMATS

    fields = {k: v for k, v in model.items() if k not in ("preset", "source", "params_b")}
    cfg = ModelConfig.from_name(model["preset"], **fields) if "preset" in model else \
        ModelConfig(**fields)
    fmt = min((f for f, b in WEIGHT_FORMATS.items() if b), key=lambda f: abs(
        WEIGHT_FORMATS[f] - bits) + (0.001 if f in ("int8", "fp8") else 0))
    return cfg.replace(weight_dtype=fmt if WEIGHT_FORMATS[fmt] != 16 else "auto", dtype="fp16",
                       kv_dtype="fp16")


def terms(row: Row, chip: dict, model: dict) -> tuple[float, float]:
    """``(x, obs)`` of a row: ``x`` the datasheet time of its step (s: bytes / bandwidth for
    decode, FLOPs / peak for prefill), ``obs`` the published time of one step (s)."""
    from zoo import counts

    cfg = design(model, row.bits)
    bw = float(chip["memory_bandwidth_gb_s"]) * 1e9
    peak = float(chip.get("peak_fp16_tflops") or "nan") * 1e12
    if row.figure in DECODE_FIGURES:
        ctx = max(row.context - 1, 1)
        step = counts.decode_step(cfg, row.batch, max(ctx - 1, 0))
        x = step.min_bytes / bw
        obs = row.batch / row.value if row.figure == R.RATE["decode"] else row.value / 1e3
    else:
        pf = counts.prefill(cfg, row.batch, row.prompt_len)
        x = pf.matmul_flops / peak if math.isfinite(peak) else math.nan
        obs = row.batch * row.prompt_len / row.value if row.figure == R.RATE["prefill"] else \
            row.value / 1e3
    return x, obs


def fit(xs: np.ndarray, obs: np.ndarray) -> tuple[float, float]:
    """``(fixed s, 1 / achieved fraction)`` of ``obs = fixed + x * k``, least squares on the
    relative error (weights ``1 / obs``); the fixed part at least 0, the fraction at most 1
    (``k >= 1``); with one distinct ``x`` the fixed part is 0."""
    w = 1 / obs
    if len(xs) == 0:
        return 0.0, math.nan
    if len(set(np.round(xs, 12))) < 2:
        return 0.0, max(float(np.median(obs / xs)), 1.0)
    A = np.stack([np.ones_like(xs), xs], 1) * w[:, None]
    (t, k), *_ = np.linalg.lstsq(A, obs * w, rcond=None)
    if t < 0 or k < 1:  # refit with the bound that broke held
        if t < 0:
            t = 0.0
            k = float(np.sum(w * w * xs * obs) / np.sum(w * w * xs * xs))
        k = max(k, 1.0)
    return float(t), float(k)


def _stage(row: Row) -> str:
    return "decode" if row.figure in DECODE_FIGURES else "prefill"


def _fit_on(prepared: list[tuple], keep) -> dict:
    """Fits per (family, stage), per (engine, stage) and per stage over the prepared rows that
    ``keep`` accepts: ``{key: (fixed, k, n)}``."""
    groups: dict = {}
    for r, x, obs in prepared:
        if not keep(r) or not math.isfinite(x):
            continue
        st = _stage(r)
        for key in ((r.family, st), (r.engine, st), ("*", st)):
            groups.setdefault(key, []).append((x, obs))
    return {k: (*fit(np.array([a for a, _ in v]), np.array([b for _, b in v])), len(v))
            for k, v in groups.items()}


def _price(r: Row, x: float, fits: dict, least: int = 3) -> tuple[float, str]:
    """The predicted step time (s) of row ``r`` from ``fits``: its family's fit when it has
    ``least`` rows, else its engine's, else every row's; and which."""
    st = _stage(r)
    for key in ((r.family, st), (r.engine, st), ("*", st)):
        if key in fits and fits[key][2] >= least:
            t, k, _ = fits[key]
            return t + x * k, f"fitted on {key[0]} ({fits[key][2]} rows)"
    return math.nan, "no fit"


def check(rows: list[Row], chips: dict, models: dict, assumed: dict | None = None) -> list[dict]:
    """Every row priced four ways, each with its signed error (%) against the published figure:
    ``loo`` (the family fitted without this chip's rows), ``newest`` (for the newest chip of a
    line of several generations, fitted on the older ones only; else the same as ``loo``),
    ``roofline`` (the datasheet alone) and ``assumed`` (``assumed``: chip -> ``(bandwidth
    fraction, compute fraction, fixed s per token)``, today's stated efficiencies)."""
    prepared = [(r, *terms(r, chips[r.chip], models[r.model])) for r in rows]
    lines = _generations(chips)
    out = []
    for r, x, obs in prepared:
        fits = _fit_on(prepared, lambda o, r=r: o.chip != r.chip)
        t_loo, basis = _price(r, x, fits)
        line = lines.get(r.chip)
        if line and line["newest"] == r.chip:  # train on the older generations only
            older = set(line["older"])
            t_new, basis_new = _price(r, x, _fit_on(prepared, lambda o, old=older: o.chip in old))
        else:
            t_new, basis_new = t_loo, basis
        a = (assumed or {}).get(r.chip)
        t_ass = math.nan
        if a:
            bw_f, c_f, fixed = a
            t_ass = fixed + x / (bw_f if _stage(r) == "decode" else c_f)
        rec = {**{k: r.raw.get(k) for k in ("chip", "vendor", "engine", "engine_version", "model",
                                            "weight_format", "bits_per_weight", "batch",
                                            "prompt_len", "context", "figure", "value", "unit",
                                            "source", "source_date", "measured_by")},
               "family": r.family, "stage": _stage(r), "x_datasheet_s": x, "published_s": obs}
        for name, t in (("loo", t_loo), ("newest", t_new), ("roofline", x), ("assumed", t_ass)):
            rec[f"pred_{name}_s"] = t
            rec[f"err_{name}_pct"] = 100 * (obs / t - 1) if t and math.isfinite(t) else math.nan
        rec["basis_loo"], rec["basis_newest"] = basis, basis_new
        out.append(rec)
    return out


def _generations(chips: dict) -> dict:
    """Chips of one line of several generations (``line`` and ``generation`` in chips.csv):
    ``{chip: {"newest": chip id, "older": [ids]}}``."""
    by: dict = {}
    for c, d in chips.items():
        if d.get("line") and d.get("generation"):
            by.setdefault(d["line"], []).append((float(d["generation"]), c))
    out = {}
    for _, members in by.items():
        if len({g for g, _ in members}) < 2:
            continue
        top = max(g for g, _ in members)
        newest = [c for g, c in members if g == top]
        older = [c for g, c in members if g < top]
        for c in newest:
            out[c] = {"newest": c, "older": older}
    return out
