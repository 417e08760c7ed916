"""Analysis: what a measurement means against the design and the hardware.

Holds the hardware specs (datasheet peaks, ``conf/hardware/*.yaml``) and the device's measured
ceilings (``hardware``), the derived figures of a row (FLOP/s, MFU, MBU, the roofline floor:
``derived``), the bottleneck class and diagnosis (``diagnosis``), the performance model
(``predict``, ``pricing``; its calibration: ``calibration``, ``needs``), module shares
(``module_shares``), other hardware (``targets``) and the design advisor (``advice``).

May import: ``zoo``, ``kernels``, ``sweep.common``, and ``sweep.measure`` to start a measuring
child (the ceilings, a calibration): every measurement itself lives there. Never the study or the
report.
"""
