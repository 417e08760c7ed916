"""The board's power limit in the performance model: how much a compute-bound kernel slows when
a stage holds the GPU busy long enough to reach it (``power_limit``, from the measured ceilings),
and for what share of a timed run (``sustained_fraction``). Times in s."""

from __future__ import annotations

import math

# A stage timed as a trial times it (``sweep.measure.trial``: ``warmup`` runs, then ``repeats``
# back to back) holds the GPU busy; past ``power_onset_s`` of load the board reaches its power
# limit and lowers its clocks, and the compute-bound kernels (timed by the calibration in short
# bursts at a duty cycle) slow down by the measured ratio ``gemm_flops_bf16`` /
# ``gemm_flops_bf16_sustained`` (``sweep.measure.ceilings``; H100 SXM: 1.11 after 0.075 s,
# ``results/reference/power_probe.md``). Memory-bound kernels are left as calibrated (timed
# back to back already). The workload's own warm-up and repeats, else sweep.config.schema's defaults.
DEFAULT_WARMUP, DEFAULT_REPEATS = 3, 10
POWER_UNCERTAINTY = 0.5  # of the added time: the GEMM's slow-down stands in for a stage's mix
# A stage that is not all compute-bound draws less power, so its compute-bound kernels slow less:
# the ceilings measure the GEMM's slow-down with copies between its calls at a few duties (the
# GEMM's share of the busy time, ``power_slowdown_by_duty``; H100 SXM, bench.power_mix_probe
# 2026-12-06: 1.16 at duty 1, 1.15 at 0.88, 1.10 at 0.72, 1.02 at 0.49, 1.01 at 0.30), and a
# stage's kernels take the slow-down at the stage's own duty, interpolated between them: its
# compute-bound FLOPs at the measured GEMM ceiling over its time (``predict._stage``; the mixed
# runs' GEMM at its ceiling for a share h of the time is duty h)


def sustained_fraction(run_s: float, busy_before_s: float, onset_s: float) -> float:
    """The share of one timed run of ``run_s`` (s), started after ``busy_before_s`` of back-to-back
    load, that lies past ``onset_s`` of load (the power limit's onset): 0 .. 1."""
    if run_s <= 0:
        return 0.0
    return min(max((busy_before_s + run_s - onset_s) / run_s, 0.0), 1.0)


def power_limit(ceilings: dict) -> tuple[tuple[tuple[float, float], ...], float] | None:
    """``(profile, onset s)`` of compute-bound kernels under sustained load from the measured
    ceilings, or None where they were not measured (a CPU, an older ceilings cache, a datasheet
    target). ``profile``: ``(duty, slow-down)`` points, duty 0 .. 1 (``slowdown_at``): at duty 1
    ``gemm_flops_bf16`` / ``gemm_flops_bf16_sustained``, at the duties of
    ``power_slowdown_by_duty`` their measured slow-downs, at duty 0 none; ceilings without the
    duties (measured before 2026-12-06) give the GEMM's slow-down at every duty, as priced
    before."""
    burst, slow = ceilings.get("gemm_flops_bf16"), ceilings.get("gemm_flops_bf16_sustained")
    if not burst or not slow or "power_onset_s" not in ceilings:
        return None
    full = max(burst / slow, 1.0)
    mixed = [(float(d), max(float(r), 1.0)) for d, r in ceilings.get("power_slowdown_by_duty")
             or () if 0.0 < float(d) < 1.0 and math.isfinite(float(r))]
    profile = ((0.0, 1.0), *sorted(mixed), (1.0, full)) if mixed else ((0.0, full), (1.0, full))
    return profile, float(ceilings["power_onset_s"])


def slowdown_at(profile: tuple[tuple[float, float], ...], duty: float) -> float:
    """The slow-down (>= 1) of a stage's compute-bound kernels at ``duty`` (0 .. 1: the stage's
    compute-bound FLOPs at the measured GEMM ceiling over its time), linear between the
    ``power_limit`` profile's measured points."""
    duty = min(max(duty, 0.0), 1.0)
    for (d0, r0), (d1, r1) in zip(profile, profile[1:]):
        if duty <= d1:
            return r0 + (r1 - r0) * ((duty - d0) / (d1 - d0) if d1 > d0 else 1.0)
    return profile[-1][1]
