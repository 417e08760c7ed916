"""Measurement: how a figure is taken on the device.

Holds the timers (``timing``), the measurement child (``child``: ``python -m sweep.measure.trial`` in a
process of its own) and the profiled window it runs (``window``), and one module per profiler,
each owning all of its work, the extra child runs included: ``nvml`` (power and energy, sampled
inside the timed child),
``modules`` (kernel time per module kind), ``torch_prof`` (torch.profiler, with ``cublaslt``'s
GEMM log), ``ncu`` (Nsight Compute) and ``nsys`` (Nsight Systems). A profiler that needs runs of its own has
``wanted(profile) -> bool`` and ``profile_trial(spec, trial_dir, cfg, workload, ceilings) -> dict``
(results-row columns, or ``_reason`` columns saying why not); the objective calls those of
``PROFILERS`` in a loop, so adding a profiler touches this list and its own file.

May import: ``zoo``, ``kernels``, ``sweep.common``. Never the study, the analysis or the
report.
"""

from __future__ import annotations

from . import modules, ncu, nsys, torch_prof

PROFILERS = (modules, torch_prof, ncu, nsys)  # run in this order after the timed child


def profilers(profile: dict) -> list:
    """The profiler modules of ``PROFILERS`` that ``profile`` (a ``ProfileConf`` dict) asks for."""
    return [p for p in PROFILERS if p.wanted(profile)]
