"""The public what-if model judged: every published figure priced leave-one-chip-out (and by
the older generations of its line, a datasheet roofline and today's stated efficiencies), each
point with an interval that has not seen its chip, and the production fits written into the
specs (``family_fits``). The dataset and the model itself: ``sweep.analysis.public``."""

from __future__ import annotations

import math

from ..common import row as R
from ..common.stats import percentile
from .public import Row, _fit_on, _keys, _price, _stage, decode_context, design, keys_of, terms

COVERAGE = 0.8  # the share of published figures a priced interval claims to hold (leave-one-chip-out)
# The quantile of the nested errors an interval's half-width is (``_half_width``): fitted, the
# smallest of 0.8, 0.85, 0.9, 0.95 whose leave-one-chip-out coverage of the 125 decode figures
# of conf/public reached COVERAGE (2026-11-26: 0.76, 0.78, 0.81 at 0.8, 0.85, 0.9). One scalar
# fitted on the figures it is judged by; ``check`` reports the coverage at COVERAGE too.
QUANTILE = 0.9


def _assumed(r: Row, model: dict, spec) -> float:
    """The step time (s) today's spec prices the row at: ``targets.predict_on`` with the spec's
    stated ``assumptions`` (roofline x efficiencies + launch cost per kernel), never its
    ``fitted`` block (fitted on these very rows)."""
    import dataclasses

    from .targets import predict_on

    spec = dataclasses.replace(spec, fitted={})
    cfg = design(model, r.bits).replace(kernels="torch")
    if _stage(r) == "decode":
        wl = {"batch": r.batch, "prompt_len": max(decode_context(r) - 1, 1), "new_tokens": 2}
        return predict_on(cfg, wl, spec, None)[R.TIME["decode"]] / 1e3
    wl = {"batch": r.batch, "prompt_len": r.prompt_len, "new_tokens": 1}
    return predict_on(cfg, wl, spec, None)[R.TIME["prefill"]] / 1e3


def check(rows: list[Row], chips: dict, models: dict, specs: dict | None = None,
          intervals: bool = False) -> list[dict]:
    """Every row priced four ways, each with its signed error (%, ``100 x (predicted /
    published - 1)`` on the rate: positive = predicted faster than published):

    - ``loo``: the fit without any row of the row's chip (its ``group``: one silicon, whatever
      the GPU core count or machine);
    - ``newest``: for the newest generation of a line (``line``, ``generation`` in chips.csv),
      fitted on the older generations only; else the same as ``loo``;
    - ``roofline``: the datasheet alone (bytes / bandwidth, FLOPs / peak);
    - ``assumed``: today's spec (``specs``: chip -> ``HardwareSpec``, the chips.csv ``spec``
      column) with its stated efficiencies.

    With ``intervals``, each ``loo`` point also gets its interval ``pred_loo_lo_s`` ..
    ``pred_loo_hi_s`` (re-centred on it: ``[t / e^h, t x e^h]``, ``loo_half_width_pct`` = ``e^h
    - 1``), drawn from the errors of fits that saw neither the row's chip nor the chip they
    priced (``_nested_spread``; a pair of chips left out per fit: about 10 s for 33 chips), and
    ``covered_loo``: whether the published figure lies in it.
    """
    prepared = [(r, *terms(r, chips[r.chip], models[r.model])) for r in rows]
    lines = _generations(chips)
    memo: dict = {}  # one fit per key, stage and set of rows (``_fit_on``)
    without = {g: _fit_on(prepared, lambda o, g=g: o.group != g, memo)
               for g in {r.group for r in rows}}
    spread = _nested_spread(prepared, memo) if intervals else {}
    by_older: dict = {}  # one fit per set of older generations, not one per row of the newest
    out = []
    for r, f, obs, reason in prepared:
        x = f[1]
        fits = without[r.group]
        t_loo, key, basis = _price(r, f, fits) if math.isfinite(x) else (math.nan, "", reason)
        h = _half_width(spread[r.group], r) if intervals and math.isfinite(t_loo) else math.nan
        older = lines.get(r.chip)
        if older is not None and math.isfinite(x):
            key_old = tuple(older)
            if key_old not in by_older:
                by_older[key_old] = _fit_on(prepared, lambda o, old=older: o.chip in old, memo)
            t_new, _, basis_new = _price(r, f, by_older[key_old])
        else:
            t_new, basis_new = t_loo, basis
        spec = (specs or {}).get(r.chip)
        t_ass = _assumed(r, models[r.model], spec) if spec is not None and math.isfinite(x) \
            else math.nan
        rec = {**{k: r.raw.get(k) for k in ("chip", "vendor", "engine", "engine_version", "model",
                                            "weight_format", "bits_per_weight", "batch",
                                            "prompt_len", "context", "figure", "value", "unit",
                                            "source", "source_date", "measured_by")},
               "family": r.family, "stage": _stage(r), "spec": spec.name if spec else "",
               "newest_of_line": older is not None, "fit_loo": key,
               "datasheet_s": x, "published_s": obs}
        for name, t in (("loo", t_loo), ("newest", t_new), ("roofline", x), ("assumed", t_ass)):
            rec[f"pred_{name}_s"] = t
            rec[f"err_{name}_pct"] = 100 * (obs / t - 1) if t and math.isfinite(t) else math.nan
        rec["basis_loo"], rec["basis_newest"] = basis, basis_new
        if intervals:
            lo, hi = t_loo / math.exp(h), t_loo * math.exp(h)  # re-centred on the point
            h0 = _half_width(spread[r.group], r, q=COVERAGE) if math.isfinite(h) else math.nan
            rec.update(pred_loo_lo_s=lo, pred_loo_hi_s=hi, loo_half_width_pct=100 * math.expm1(h),
                       covered_loo=bool(lo <= obs <= hi) if math.isfinite(h) else None,
                       covered_loo_at_claim=bool(abs(math.log(obs / t_loo)) <= h0)
                       if math.isfinite(h0) else None)
        out.append(rec)
    return out


def _nested_spread(prepared: list[tuple], memo: dict | None = None) -> dict:
    """For each chip ``g`` (silicon group): the absolute log errors ``|ln(published /
    predicted)|`` of every other chip's rows, each priced by a fit without ``g`` and without its
    own chip: ``{g: [(row, error), ...]}``. An interval for a row of ``g`` is drawn from them
    (``_half_width``), so neither the point nor its interval has seen ``g``. ``memo``:
    ``_fit_on``'s."""
    groups = sorted({r.group for r, *_ in prepared})
    errs: dict = {g: [] for g in groups}
    for i, g in enumerate(groups):
        for h in groups[i + 1:]:
            fits = _fit_on(prepared, lambda o, g=g, h=h: o.group not in (g, h), memo)
            for r, f, obs, _ in prepared:
                if r.group not in (g, h) or not math.isfinite(f[1]):
                    continue
                t, _, _ = _price(r, f, fits)
                if math.isfinite(t) and t > 0:
                    errs[g if r.group == h else h].append((r, abs(math.log(obs / t))))
    return errs


def _half_width(spread: list[tuple], r: Row, least: int = 5, q: float = QUANTILE) -> float:
    """The half-width ``h`` (natural log) of row ``r``'s interval ``[t / e^h, t x e^h]``: the
    ``q`` quantile of the nested errors (``_nested_spread``) of the rows of the most specific of
    ``r``'s fit keys with at least ``least`` of them (same stage); NaN with none."""
    st = _stage(r)
    for key in _keys(r):
        e = [x for o, x in spread if _stage(o) == st and key in _keys(o)]
        if len(e) >= least:
            return percentile(e, 100 * q)
    return math.nan


def _generations(chips: dict) -> dict:
    """The chips of the newest generation of a line of several (``line``, ``generation`` in
    chips.csv): ``{chip: [chips of the older generations]}``."""
    by: dict = {}
    for c, d in chips.items():
        if d.get("line") and d.get("generation"):
            by.setdefault(d["line"], []).append((float(d["generation"]), c))
    out = {}
    for members in by.values():
        top = max(g for g, _ in members)
        older = [c for g, c in members if g < top]
        if older:
            out.update({c: older for g, c in members if g == top})
    return out


KINDS = ("loo", "newest", "roofline", "assumed")


def family_fits(rows: list[Row], chips: dict, models: dict, table: list[dict]) -> dict:
    """The production fits (every row) per key and stage, each with its rows, chips, sources
    and the signed leave-one-chip-out errors (%) of the rows it priced: ``{(key, stage): {...}}``
    (the values ``python -m sweep.cli.whatif --fit-public`` writes into the specs)."""
    prepared = [(r, *terms(r, chips[r.chip], models[r.model])) for r in rows]
    fits = _fit_on(prepared, lambda o: True)
    out = {}
    for (key, st), (c, n, _) in fits.items():
        members = [r for r, f, _, _ in prepared if _stage(r) == st and key in _keys(r)
                   and math.isfinite(f[1])]
        errs = [e["err_loo_pct"] for e in table if e["stage"] == st
                and key in keys_of(e["family"], e["engine"]) and math.isfinite(e["err_loo_pct"])]
        out[(key, st)] = {"per_layer_s": float(c[0]), "fraction": float(1 / c[1]),
                          "dequant_bytes_per_weight": float(c[2]), "rows": n,
                          "chips": sorted({r.group for r in members}),
                          "sources": sorted({r.source for r in members}),
                          "loo_error_pct": [percentile(errs, 10),
                                            percentile(errs, 90)] if errs else None,
                          "loo_half_width_pct": _width_of(errs)}
    return out


def _width_of(errs_pct: list[float]) -> float | None:
    """The half-width (%, ``e^h - 1``) of an interval ``[t / e^h, t x e^h]`` claiming
    ``COVERAGE`` of the figures whose signed leave-one-chip-out errors (%, ``published /
    predicted - 1`` on the time) are ``errs_pct``: the ``QUANTILE`` quantile of ``|ln(1 + e)|``;
    None without errors."""
    logs = [abs(math.log1p(e / 100)) for e in errs_pct if e > -100]
    return 100 * math.expm1(percentile(logs, 100 * QUANTILE)) if logs else None
