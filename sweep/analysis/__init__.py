"""Analysis: what a measurement means against the design and the hardware.

Holds the hardware specs (datasheet peaks, ``conf/hardware/*.yaml``: ``hardware``), the derived
figures of a row (FLOP/s, MFU, MBU, the roofline floor: ``derived``), the bottleneck class and
diagnosis (``diagnosis``), the performance model (``predict``, ``pricing``; its calibration's store
and needs: ``calibration_store``, ``needs``; a transfer: ``anchors``; judged on a validation set:
``validation``), module shares (``module_shares``), other hardware (``targets``, a study's designs
there: ``study_targets``) and the design advisor (``advice``). It starts no measurement: the
measured ceilings and calibration it prices from are handed to it (``sweep.caches`` keeps them).

May import: ``zoo``, ``kernels``, ``sweep.common``. Never the measurement, the caches, the study
or the report.
"""
