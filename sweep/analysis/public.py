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
family's rows, each chip weighing the same (``fit``), each fit shrunk toward its parent's (a
family toward its vendor and kind, that toward its kind, then every row: ``_fit_on``).
``public_loo.check`` prices every row with parameters fitted without its chip
(leave-one-chip-out; a family left with no other chip takes the fit over every family of its
engine, then over all rows) and, for the chips of one line of several generations, trains on the
older and tests the newest. Beside them the same rows are priced by a pure datasheet roofline
and by each spec's assumed efficiencies, so the gain is visible.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..common import row as R
from ..common.env import CONF

DATA = CONF / "public"
# the published figures a row may hold: per-sequence rates (tokens/s) and per-token times (ms)
DECODE_FIGURES = (R.RATE["decode"], "tpot_ms")
PREFILL_FIGURES = (R.RATE["prefill"], R.TIME["prefill"])
FIGURES = {R.RATE["decode"]: "tokens/s", R.RATE["prefill"]: "tokens/s", R.TIME["prefill"]: "ms",
           "tpot_ms": "ms"}
REQUIRED = ("chip", "vendor", "engine", "engine_version", "model", "weight_format",
            "bits_per_weight", "batch", "figure", "value", "unit", "source", "source_date",
            "measured_by")
CHIP_REQUIRED = ("chip", "vendor", "kind", "group", "bandwidth_source", "flops_source")
DEFAULT_CONTEXT = 256  # tokens: a decode figure whose context the source does not state


@dataclass
class Row:
    """One published figure, with what the model needs of it (``prompt_len``/``context`` None
    where the source does not state them)."""

    chip: str
    group: str
    family: str
    engine: str
    model: str
    bits: float
    batch: int
    prompt_len: int | None
    context: int | None
    devices: int
    figure: str
    value: float
    source: str
    raw: dict


def _num(r: dict, k: str, where: str) -> float | None:
    v = str(r.get(k, "")).strip()
    if not v:
        return None
    try:
        return float(v)
    except ValueError:
        raise ValueError(f"{where}: {k}={v!r} is not a number") from None


def load(path: Path | None = None) -> tuple[list[Row], dict, dict]:
    """``(rows, chips, models)``: the dataset checked (required fields, a source on every row,
    units matching the figure, numbers positive, a prefill figure's prompt length stated), the
    chips' datasheets (every figure with its source) and the models' shapes.

    Raises:
        ValueError: a row that fails a check (its file, line and the field named).
    """
    import yaml

    d = path or DATA
    chips = {}
    for i, r in enumerate(csv.DictReader(open(d / "chips.csv")), start=2):
        missing = [k for k in CHIP_REQUIRED if not str(r.get(k, "")).strip()]
        if missing:
            raise ValueError(f"chips.csv line {i}: no {', '.join(missing)}")
        for k in ("memory_bandwidth_gb_s", "peak_fp16_tflops"):
            v = _num(r, k, f"chips.csv line {i}")
            if v is not None and v <= 0:
                raise ValueError(f"chips.csv line {i}: {k} must be positive")
        chips[r["chip"]] = r
    models = yaml.safe_load((d / "models.yaml").read_text())
    rows = []
    for i, r in enumerate(csv.DictReader(open(d / "measurements.csv")), start=2):
        where = f"measurements.csv line {i}"
        missing = [k for k in REQUIRED if not str(r.get(k, "")).strip()]
        if missing:
            raise ValueError(f"{where}: no {', '.join(missing)}")
        if r["figure"] not in FIGURES:
            raise ValueError(f"{where}: figure {r['figure']!r} is not one of {', '.join(FIGURES)}")
        if r["unit"] != FIGURES[r["figure"]]:
            raise ValueError(f"{where}: {r['figure']} in {r['unit']!r}, expected "
                             f"{FIGURES[r['figure']]!r}")
        if r["chip"] not in chips:
            raise ValueError(f"{where}: chip {r['chip']!r} not in chips.csv")
        if r["model"] not in models:
            raise ValueError(f"{where}: model {r['model']!r} not in models.yaml")
        if not r["source"].startswith(("http://", "https://")):
            raise ValueError(f"{where}: source {r['source']!r} is not a URL")
        value, bits, batch = (_num(r, k, where) for k in ("value", "bits_per_weight", "batch"))
        prompt, ctx = (_num(r, k, where) for k in ("prompt_len", "context"))
        if value <= 0 or bits <= 0 or batch < 1:
            raise ValueError(f"{where}: value, bits_per_weight and batch must be positive")
        if r["figure"] in PREFILL_FIGURES and not prompt:
            raise ValueError(f"{where}: a {r['figure']} figure needs its prompt_len")
        kind = chips[r["chip"]]["kind"]
        rows.append(Row(chip=r["chip"], group=chips[r["chip"]]["group"],
                        family=f"{r['vendor'].lower()}-{kind}/{r['engine']}", engine=r["engine"],
                        model=r["model"], bits=bits, batch=int(batch),
                        prompt_len=None if prompt is None else int(prompt),
                        context=None if ctx is None else int(ctx),
                        devices=int(_num(r, "devices", where) or 1), figure=r["figure"],
                        value=value, source=r["source"], raw=r))
    if not rows:  # (an empty file: every figure downstream would be a KeyError)
        raise ValueError(f"{d / 'measurements.csv'}: no measurement rows")
    return rows, chips, models


def design(model: dict, bits: float):
    """The zoo design of a ``models.yaml`` entry: a shipped preset (``preset``) or the fields of
    its published config.json; fp16, weights at ``bits`` per weight (the named format of
    ``zoo.formats.WEIGHT_FORMATS`` nearest to it)."""
    from zoo import ModelConfig
    from zoo.formats import WEIGHT_FORMATS

    fields = {k: v for k, v in model.items() if k not in ("preset", "source", "params_b")}
    cfg = ModelConfig.from_name(model["preset"], **fields) if "preset" in model else \
        ModelConfig(**fields)
    fmt = min((f for f, b in WEIGHT_FORMATS.items() if b), key=lambda f: abs(
        WEIGHT_FORMATS[f] - bits))
    return cfg.replace(weight_dtype=fmt if WEIGHT_FORMATS[fmt] != 16 else "auto", dtype="fp16",
                       kv_dtype="fp16")


def decode_context(row: Row) -> int:
    """Mean context (tokens) of the published decode steps: halfway from the prompt to the
    stated context; ``DEFAULT_CONTEXT`` where no context is stated, half the context where no
    prompt is."""
    if row.context is None:
        return DEFAULT_CONTEXT
    start = row.prompt_len if row.prompt_len is not None else 0
    return max((start + row.context) // 2, 1)


def terms(row: Row, chip: dict, model: dict) -> tuple[np.ndarray, float, str]:
    """``(features, obs, reason)`` of a row. ``features`` = ``[n_layers, x, x_q]``: ``x`` the
    datasheet time of one step (s: the design's minimum bytes / memory bandwidth for decode, its
    matmul FLOPs / fp16 peak for prefill; NaN where the chip's datasheet lacks the figure,
    ``reason`` says which), ``x_q`` the dequantize term of a decode step with quantized weights
    (s: one byte per weight / bandwidth; 0 for 16-bit weights and for prefill); ``obs`` the
    published time of one step (s: batch / tokens/s, or the figure in ms)."""
    from zoo import counts

    cfg = design(model, row.bits)
    bw = float(chip.get("memory_bandwidth_gb_s") or "nan") * 1e9
    peak = float(chip.get("peak_fp16_tflops") or "nan") * 1e12
    if row.figure in DECODE_FIGURES:
        step = counts.decode_step(cfg, row.batch, decode_context(row))
        x = step.min_bytes / bw
        p = counts.params(cfg)
        xq = (p.non_embedding + p.lm_head) / bw if row.bits < 16 else 0.0
        obs = row.batch / row.value if row.figure == R.RATE["decode"] else row.value / 1e3
        reason = "" if math.isfinite(bw) else "no memory bandwidth in chips.csv"
    else:
        pf = counts.prefill(cfg, row.batch, row.prompt_len)
        x, xq = pf.matmul_flops / peak, 0.0
        obs = row.batch * row.prompt_len / row.value if row.figure == R.RATE["prefill"] else \
            row.value / 1e3
        reason = "" if math.isfinite(peak) else "no fp16 peak in chips.csv"
    if row.devices > 1:
        x, reason = math.nan, f"{row.devices} devices: a one-device model does not price it"
    return np.array([cfg.n_layers, x, xq], dtype=float), obs, reason


def fit(F: np.ndarray, obs: np.ndarray, groups: list | None = None) -> np.ndarray:
    """``[per-layer s, k, q]`` of ``obs = n_layers x per_layer + x x k + x_q x q`` (``F`` rows
    ``[n_layers, x, x_q]``): least squares on the relative error (weights ``1 / obs``) with every
    term non-negative and the achieved fraction at most 1 (``k >= 1``): the best of the
    non-negative solutions over the subsets of terms (three terms: eight subsets). With
    ``groups`` (each row's silicon), every chip weighs the same in the fit (a row's squared error
    counts ``1 / rows of its chip``): the fit prices a chip it has not seen, so a chip with twenty
    rows must not outvote three chips with two rows each."""
    w = 1 / obs
    if groups is not None:
        n = {g: groups.count(g) for g in set(groups)}
        w = w * np.sqrt([1 / n[g] for g in groups])
    y = (obs - F[:, 1]) * w  # k = 1 + c with c >= 0
    A = F * w[:, None]
    best, err = np.array([0.0, 1.0, 0.0]), math.inf
    for mask in range(8):
        cols = [i for i in range(3) if mask >> i & 1 and np.any(A[:, i])]
        c = np.zeros(3)
        if cols:
            sol, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
            if np.any(sol < 0):
                continue
            c[cols] = sol
        e = float(np.sum((A @ c - y) ** 2))
        if e < err - 1e-15:
            best, err = c, e
    best[1] += 1.0
    return best


def _stage(row: Row) -> str:
    return "decode" if row.figure in DECODE_FIGURES else "prefill"


def keys_of(family: str, engine: str) -> tuple[str, ...]:
    """The fits a row of ``family`` (``vendor-kind/engine``) may be priced from, most specific
    first: its family, its vendor and kind, its engine, its kind, every row."""
    vk = family.split("/")[0]
    return (family, vk, engine, "*-" + vk.split("-")[1], "*")


def _keys(r: Row) -> tuple[str, ...]:
    return keys_of(r.family, r.engine)


def parents_of(family: str, engine: str) -> dict:
    """``{key: the key its fit is shrunk toward}`` for the fits of ``keys_of(family, engine)``: a
    family toward its vendor and kind, that toward its kind, the engine and the kind toward every
    row (the one key sure to hold all of an engine's rows, whatever its kinds); ``*``: None."""
    fam, vk, eng, kind, every = keys_of(family, engine)
    return {fam: vk, vk: kind, eng: every, kind: every, every: None}


def _depth(key: str, parents: dict) -> int:
    """Steps from ``key`` up to every row (``*``: 0) along ``parents``."""
    return 0 if parents[key] is None else 1 + _depth(parents[key], parents)


PRIOR = "(parent fit)"  # the pseudo-chip of a fit shrunk toward its parent (``_fit_on``)


def _fit_on(prepared: list[tuple], keep, memo: dict | None = None) -> dict:
    """Fits per key of ``_keys`` and stage over the prepared rows that ``keep`` accepts:
    ``{(key, stage): (coefficients of ``fit``, rows, chips)}``.

    Each fit is shrunk toward its parent's (``parents_of``; the parents fitted first, shrunk
    in turn): the parent's step times (s) at the key's own rows join them as one more chip,
    weighing what any chip weighs in ``fit``, wherever the parent holds a chip the key does not.
    A key of few chips then keeps its parent's shape where its own rows say little, and its own
    where they agree (hierarchical shrinkage, its strength fixed a priori: the parent is worth
    one chip). ``rows`` and ``chips`` count the key's own rows only. ``memo`` (a dict kept by the
    caller for one ``prepared`` list) holds each fit by its key, stage, rows and prior: the fits
    of a leave-one-chip-out check differ only where the left-out chip had rows
    (``_nested_spread`` fits the same row sets thousands of times)."""
    groups: dict = {}
    parents: dict = {}
    for i, (r, f, _, _) in enumerate(prepared):
        if not keep(r) or not math.isfinite(f[1]):
            continue
        parents.update(parents_of(r.family, r.engine))
        for key in _keys(r):
            groups.setdefault((key, _stage(r)), []).append(i)
    memo = {} if memo is None else memo
    out: dict = {}
    for k in sorted(groups, key=lambda k: _depth(k[0], parents)):
        idx = groups[k]
        rows = [prepared[i] for i in idx]
        chips = [r.group for r, _, _, _ in rows]
        up = (parents[k[0]], k[1])
        prior = out[up][0] if up in out and out[up][2] > len(set(chips)) else None
        mk = (k, tuple(idx), None if prior is None else tuple(prior))
        if mk not in memo:
            F = np.array([f for _, f, _, _ in rows])
            obs = np.array([obs for _, _, obs, _ in rows])
            g = list(chips)
            if prior is not None:
                F, obs, g = np.vstack([F, F]), np.concatenate([obs, F @ prior]), g + [PRIOR] * len(g)
            memo[mk] = (fit(F, obs, g), len(idx), len(set(chips)))
        out[k] = memo[mk]
    return out


def _price(r: Row, f: np.ndarray, fits: dict, least: int = 3) -> tuple[float, str, str]:
    """``(step time s, key, basis)``: row ``r`` (features ``f``) priced from the most specific
    fit of ``_keys`` in ``fits`` with ``least`` rows of at least two chips, that fit's key and
    its words (``key (n rows, m chips)``); NaN and ``no fit`` where none has."""
    st = _stage(r)
    for key in _keys(r):
        if (key, st) in fits and fits[(key, st)][1] >= least and fits[(key, st)][2] >= 2:
            c, n, nc = fits[(key, st)]
            return float(f @ c), key, f"{key} ({n} rows, {nc} chips)"
    return math.nan, "", "no fit"
