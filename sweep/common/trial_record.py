"""One trial's results as a typed record, flattened to the results row in one place.

A measured trial's figures come from several places: the design and its workload (the plan),
the child's environment and the device lock (``environment``), the timed child (``measured``:
each stage's median time with its spread over the repeats, ``SPREADS``, the rates, memory,
energy), the analysis of those figures (``derived``: FLOP/s, MFU, MBU against the datasheet and
the measured ceilings, the bottleneck class and diagnosis), the performance model
(``predicted``), the profilers' runs (``profilers``) and the trial's own status (``status``:
noisy, measured again, its folder). ``TrialRecord`` holds each in a section of its own, filled
where the figure is made (``sweep.objective``), and ``columns`` flattens them to the one wide row
(``sweep.common.row`` names its columns) that the study stores as one JSON attribute and the
report reads — optimum-benchmark's ``BenchmarkReport`` / ``Measurements`` as the model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

# the sections in the order their columns stand in the row (a later one's value wins where two
# hold one column: ``overlaps`` lists them)
SECTIONS = ("design", "workload", "environment", "measured", "derived", "predicted",
            "profilers", "status")


@dataclass
class TrialRecord:
    """A trial's results by section, each ``{column: value}`` (``SECTIONS``).

    Attributes:
        design: the design's fields (``zoo.ModelConfig`` names), the experiment, study, mode,
            profile and the kernel switches (``switch_<name>``).
        workload: ``batch``, ``prompt_len``, ``new_tokens``, ``routing_skew``.
        environment: the child's versions, device and driver; the device lock's use.
        measured: the timed child's figures (times in ms with ``_min`` / ``_p90``, rates in
            tokens/s, memory in bytes, energy in J/token or NaN with ``_reason``).
        derived: figures computed from the measured ones (FLOP/s, MFU, MBU, floors), the
            bottleneck class and diagnosis.
        predicted: the performance model's (``{stage}_pred_ms*``, errors, basis).
        profilers: the profilers' columns (modules, torch.profiler, ncu, nsys) and their checks.
        status: ``noisy``, ``noisy_stages``, ``remeasured``, ``trial_dir``.
    """

    design: dict = field(default_factory=dict)
    workload: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)
    derived: dict = field(default_factory=dict)
    predicted: dict = field(default_factory=dict)
    profilers: dict = field(default_factory=dict)
    status: dict = field(default_factory=dict)

    def columns(self) -> dict:
        """The results row: every section's columns, in ``SECTIONS`` order."""
        out: dict = {}
        for s in SECTIONS:
            out.update(getattr(self, s))
        return out

    def overlaps(self) -> dict[str, list[str]]:
        """``{column: [sections holding it]}`` for the columns in more than one section."""
        seen: dict[str, list[str]] = {}
        for s in SECTIONS:
            for k in getattr(self, s):
                seen.setdefault(k, []).append(s)
        return {k: v for k, v in seen.items() if len(v) > 1}


def row_json(row: dict) -> str:
    """A results row as the study stores it, one JSON object (``report.tables`` unpacks it):
    NaN as null, an infinity as its string, a list, tuple or dict as its own JSON string."""
    return json.dumps({k: _stored(v) for k, v in row.items()})


def _stored(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else str(v)
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return v
