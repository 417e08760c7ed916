"""What a study optimizes and bounds, checked before any work (``sweep.plan``): its objectives
(the results row's figures, ``sweep.common.row.COLUMNS``) with one direction each, and its
constraints (bands over ``zoo.counts.summary``'s figures)."""

from __future__ import annotations

from ..common import row

# the figures a predict-only study's rows hold (``sweep.analysis.targets``'s, and zoo.counts'):
# no measured peak there, so no MFU / MBU; energy only as decode's TDP bound
PREDICTED = ("ttft_ms", "decode_tpot_ms", "decode_tok_s", "prefill_tok_s", "peak_mem_bytes",
             "decode_j_per_token", *(c.name for c in row.COLUMNS.values() if c.kind == "analytic"))


def check_objectives(objectives: list, directions: list, profile: dict, predict: bool) -> None:
    """Refuse objectives no study could optimize: none, one named twice, a figure the row does
    not have, a direction that is not ``maximize`` / ``minimize`` or not one per objective,
    energy without NVML in a measured study, or a figure a predict-only study does not predict.

    Raises:
        ValueError: naming the objective(s)."""
    if not objectives:
        raise ValueError("study.objectives is empty: name at least one figure to optimize "
                         "(e.g. [decode_tok_s])")
    unknown = [o for o in objectives if o not in row.OBJECTIVES]
    if unknown:
        raise ValueError(f"unknown objective(s) {unknown}; choose from "
                         f"{', '.join(sorted(row.OBJECTIVES))}")
    if twice := sorted({o for o in objectives if objectives.count(o) > 1}):
        raise ValueError(f"study.objectives names {', '.join(twice)} twice: each figure once")
    if len(objectives) != len(directions) or any(d not in ("maximize", "minimize")
                                                   for d in directions):
        raise ValueError("study.directions must give maximize or minimize for each objective")
    nvml_only = [o for o in objectives if o.endswith("_j_per_token")]
    if nvml_only and not profile.get("nvml") and not predict:
        raise ValueError(f"objective(s) {nvml_only} need energy from NVML: add profile=nvml "
                         "(or profile=ncu/full)")
    if predict and (unpriced := [o for o in objectives if o not in PREDICTED]):
        raise ValueError(f"objective(s) {unpriced} are not predicted (a predict-only study has "
                         f"no measured peak or energy): choose from {', '.join(PREDICTED)}")


def check_constraints(checked: list) -> None:
    """Refuse constraints no design could be judged by: a figure ``zoo.counts.summary`` does not
    give, or a band that is not ``{low, high}`` numbers with ``low <= high``. ``checked``:
    ``[(constraints, design)]`` (on the CPU fallback the predicted table's too).

    Raises:
        ValueError: naming the constraint."""
    from zoo import counts

    for cons, design in checked:
        known = set(counts.summary(design, 1, 1, 1))
        if bad := sorted(set(cons) - known):
            raise ValueError(f"unknown constraint figure(s) {bad}; choose from "
                             f"{', '.join(sorted(known))}")
    for key, band in [kv for cons, _ in checked for kv in cons.items()]:
        if not isinstance(band, dict) or not set(band) <= {"low", "high"} or not band:
            raise ValueError(f"constraint {key!r} must be a band {{low: ..., high: ...}}, got {band}")
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in band.values()):
            raise ValueError(f"constraint {key!r}: {band} must bound by numbers")
        if band.get("low", float("-inf")) > band.get("high", float("inf")):
            raise ValueError(f"constraint {key!r}: low={band['low']} is above high={band['high']}"
                             ": no design could be inside")
