"""Analysis: what a measurement means against the design and the hardware.

Holds the hardware specs (datasheet peaks, ``conf/hardware/*.yaml``) and the ceilings measured on
the device (``hardware``), the derived figures of a row (FLOP/s, MFU, MBU, the roofline floor:
``derived``), the bottleneck class and diagnosis (``diagnosis``) and, as they land, the calibrated
performance model and the design advisor.

May import: ``zoo``, ``sweep.env``, ``sweep.atomic`` and the timers of ``sweep.measure.timing``
(the ceilings and calibration micro-benchmarks are timed with them). Never the study or the report.
"""
