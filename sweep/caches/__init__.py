"""Caches: this device's measured facts that the performance model prices from, kept current by
starting their measuring children — the ceilings (``ceiling_cache``), the calibration of
kernel micro-benchmarks (``calibration``, its grids ``grids``) and the anchors of a calibration
transferred here (``transfer``).

The study, its workers and the command-line tools call them before a trial or a prediction;
the performance model (``sweep.analysis``) reads what they hand it and starts nothing, the
measurements themselves live in ``sweep.measure``.

May import: ``zoo``, ``kernels``, ``sweep.common``, ``sweep.measure`` and ``sweep.analysis``.
Never the study or the report.
"""
