"""The board's power limit in the performance model: how much a compute-bound kernel slows when
a stage holds the GPU busy long enough to reach it (``power_limit``, from the measured ceilings),
and for what share of a timed run (``sustained_fraction``). Times in s."""

from __future__ import annotations

# A stage timed as a trial times it (``sweep.measure.trial``: ``warmup`` runs, then ``repeats``
# back to back) holds the GPU busy; past ``power_onset_s`` of load the board reaches its power
# limit and lowers its clocks, and the compute-bound kernels (timed by the calibration in short
# bursts at a duty cycle) slow down by the measured ratio ``gemm_flops_bf16`` /
# ``gemm_flops_bf16_sustained`` (``sweep.measure.ceilings``; H100 SXM: 1.11 after 0.075 s,
# ``results/reference/power_probe.md``). Memory-bound kernels are left as calibrated (timed
# back to back already). The workload's own warm-up and repeats, else sweep.schema's defaults.
DEFAULT_WARMUP, DEFAULT_REPEATS = 3, 10
POWER_UNCERTAINTY = 0.5  # of the added time: the GEMM's slow-down stands in for a stage's mix


def sustained_fraction(run_s: float, busy_before_s: float, onset_s: float) -> float:
    """The share of one timed run of ``run_s`` (s), started after ``busy_before_s`` of back-to-back
    load, that lies past ``onset_s`` of load (the power limit's onset): 0 .. 1."""
    if run_s <= 0:
        return 0.0
    return min(max((busy_before_s + run_s - onset_s) / run_s, 0.0), 1.0)


def power_limit(ceilings: dict) -> tuple[float, float] | None:
    """``(slow-down, onset s)`` of compute-bound kernels under sustained load from the measured
    ceilings (``gemm_flops_bf16`` / ``gemm_flops_bf16_sustained``, ``power_onset_s``), or None
    where they were not measured (a CPU, an older ceilings cache, a datasheet target)."""
    burst, slow = ceilings.get("gemm_flops_bf16"), ceilings.get("gemm_flops_bf16_sustained")
    if not burst or not slow or "power_onset_s" not in ceilings:
        return None
    return max(burst / slow, 1.0), float(ceilings["power_onset_s"])
