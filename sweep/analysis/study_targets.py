"""The designs of a measured study predicted on other chips: one row per (design, target),
priced from the target's own shipped calibration where it has one, the study device's
(transferred to another NVIDIA GPU), else roofline x the spec's stated efficiencies
(``sweep.analysis.targets.predict_on``); ``sweep.report.other_hardware`` writes the tables and
fronts."""

from __future__ import annotations

import math
from pathlib import Path

from ..common.row import COLUMNS
from . import calibration_store as store
from .hardware import load_spec
from .predict import measured_routing
from .pricing import Calibrated
from .targets import config_of, from_gpu, predict_on, switches_of


def study_calibration(meta: dict, given, study_dir: Path) -> Calibrated | None:
    """``given`` (``--calibration``'s file, loaded: a ``Calibration``), else the study device's
    (its cache beside the study, else the one shipped for it), or None."""
    dev = meta.get("device") or (meta.get("env") or {}).get("device", "")
    have = given if given is not None else (
        store.load(dev, cal_dir=study_dir.parent / "calibration")
        or store.with_code_staleness(store.shipped(dev)))
    return None if have is None else Calibrated(have)


def for_target(spec, calibration: Calibrated | None) -> Calibrated | None:
    """The calibration to price ``spec`` from: the one shipped for that GPU when there is one
    (its own measurement beats a transfer), else ``calibration`` where ``predict_on`` can use it
    (its own device, or an NVIDIA GPU's with the ceilings a transfer needs: never a CPU's)."""
    if spec.kind == "gpu" and (own := store.shipped_for(spec)) is not None:
        return Calibrated(own)
    if calibration is None:
        return None
    return calibration if from_gpu(calibration.meta) or spec.kind != "gpu" else None


def predict_designs(meta: dict, df, targets: list[str], calibration: Calibrated | None,
                    label=lambda r: f"trial {r.get('number')}"):
    """One row per (completed design of ``df``, target) with ``predict_on``'s figures, the
    design's ``label(row)`` (``design``), the measured objectives (``measured_<name>``) and the
    design's rank per target (``rank``, by the study's first objective among the designs that
    fit the target's memory). An MoE row is priced on the routing its trial measured
    (``predict``'s ``routing``): the same weights route alike on any chip.

    Args:
        meta: the study's ``study.json`` (its workload, objectives, directions, mode).
        df: its trials table (a pandas DataFrame; only ``COMPLETE`` rows are priced).
        targets: hardware spec names (``conf/hardware``).
        calibration: the study device's (``study_calibration``), or None: roofline x stated
            efficiencies where no target has its own.

    Returns:
        a pandas DataFrame; a design a spec cannot price (a figure missing) has ``basis_kind``
        ``not predicted`` and the reason in ``prediction_reason``, never a guess.
    """
    import pandas as pd

    done = df[df["state"] == "COMPLETE"] if "state" in df else df
    wl = meta["workload"]
    objective = meta["objectives"][0]
    specs = {t: load_spec(t) for t in targets}
    cals = {t: for_target(specs[t], calibration) for t in targets}
    rows = []
    for _, r in done.iterrows():
        cfg = config_of(r)
        sw = switches_of(r)
        routing = measured_routing(r)  # an MoE row's measured routing: alike on any chip
        for t in targets:
            try:
                p = predict_on(cfg, wl, specs[t], cals[t], mode=meta.get("mode", "cudagraph"),
                               switches=sw, routing=routing)
            except (ValueError, KeyError) as e:  # the spec lacks a figure: said, never guessed
                p = {"target": t, "fits_memory": math.nan, "prediction_basis": "not predicted",
                     "basis_kind": "not predicted", "prediction_reason": str(e)}
            # the design's own analytic figures hold on any chip; a measured one never stands in
            p.update(design=label(r), study=meta.get("study", ""),
                     **{f"measured_{o}": r.get(o, math.nan) for o in meta["objectives"]},
                     **{o: r[o] for o in meta["objectives"] if o not in p and o in r
                        and o in COLUMNS and COLUMNS[o].kind == "analytic"})
            rows.append(p)
    out = pd.DataFrame(rows)
    for o in meta["objectives"]:  # no design priced on any target: the column, all unknown
        if o not in out:
            out[o] = math.nan
    asc = meta["directions"][0] == "minimize"
    # ranked: the designs that fit, or whose fit is unknown (NaN: no memory size stated)
    fit = out[(out.fits_memory != False) & out[objective].notna()]  # noqa: E712
    out["rank"] = fit.groupby("target")[objective].rank(ascending=asc, method="min")
    return out
