"""A calibration measured elsewhere priced for this device: its transfer's anchors (a sample of
the source table's own entries, ``sweep.analysis.anchors.sample``) timed here in a child process
(``sweep.measure.calibration_run``), then ``sweep.analysis.anchors.transfer``."""

from __future__ import annotations

from pathlib import Path

from ..analysis.anchors import sample, transfer
from ..analysis.calibration_store import Calibration
from ..analysis.pricing import Calibrated


def measure(device: dict, table, switches, tuning_dir: Path | None = None,
            timeout_s: float = 300.0, log=print) -> list[dict]:
    """The anchors of ``table`` (``sample``) timed on this ``device`` in a child process
    (``sweep.measure.calibration_run.measure_in_child``): rows as the calibration's (``kind``,
    shape columns, ``time_s``).

    Raises:
        RuntimeError: the measurement failed (the child's error tail in the message).
    """
    from ..measure.calibration_run import measure_in_child

    gemm, gemv = sample(table)
    log(f"calibration: timing {len(gemm)} GEMM and {len(gemv)} GEMV entries of the source "
        f"table on {device['name']} (the transfer's anchors)")
    spec = {"device": device["type"], "quick": device["type"] != "cuda",
            "switches": switches.to_dict(),
            "tuning_dir": str(tuning_dir) if tuning_dir else None, "base": [],
            "gemm": gemm, "gemv": gemv, "decode_attn": [], "prefill_attn": []}
    return measure_in_child(spec, "transfer anchors", timeout_s).to_dict("records")


def transfer_here(device: dict, cal: Calibration, ceilings: dict, dtype: str, switches,
                  tuning_dir: Path | None = None):
    """``(Calibrated, anchor rows or None)``: another device's ``Calibration`` priced for this
    ``device`` (``transfer``): by anchors timed here on a GPU (``measure``),
    else by the ratio of its ceilings and this device's measured ``ceilings``."""
    here = measure(device, cal.table, switches, tuning_dir) if device["type"] == "cuda" else None
    return transfer(Calibrated(cal), cal.meta["ceilings"],
                    dict(ceilings, device=device["name"]), dtype, anchors=here), here
