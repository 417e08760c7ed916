"""Hardware specs: datasheet peaks from ``conf/hardware/*.yaml``.

Every MFU and MBU is reported twice: against the datasheet peak of the spec, and against the
ceiling measured on this device (``sweep.caches.ceiling_cache.measure_ceilings``: a large
device-to-device copy for bandwidth, counting bytes read plus bytes written; a large GEMM per
dtype for FLOP/s), which this package is handed and never measures itself.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

import yaml

from ..common.env import CONF

HW_DIR = CONF / "hardware"
DTYPE_PEAK_KEY = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}


@dataclass
class HardwareSpec:
    """Datasheet figures of one device. Units: TFLOP/s (dense; int8/int4 in TOP/s), GB/s (1e9
    bytes/s), MB, W; ``memory_gb`` in the binary gigabytes memory capacities are stated in
    (GiB, 2^30 bytes: an H100's "80 GB" is 80 GiB, of which NVML reports 79.6 GiB to programs).

    ``kind`` is ``gpu``, ``cpu`` or ``npu``; ``unified_memory`` where the device shares the host's
    memory (``memory_gb`` then is the largest configuration). ``source`` and ``date`` say where
    each figure comes from; ``estimates`` names the fields that are not vendor figures (derived
    from cores x lanes x clock, or reported by third parties: see ``source``). ``assumptions``
    holds what the performance model needs for a chip it has no calibration of:
    ``compute_efficiency`` and ``bandwidth_efficiency`` (achievable fraction of the peaks for large
    GEMMs and streaming reads), ``launch_us`` (fixed cost per kernel or op), and ``basis`` (where
    each comes from). ``fitted`` (written by ``python -m sweep.cli.whatif --fit-public``) holds,
    per stage, the fit of the chip's engine family on public measurements
    (``sweep.analysis.public``): per-layer cost, achieved fraction, dequantize cost, the rows,
    chips and sources it rests on and its leave-one-chip-out error band; where present it
    supersedes ``assumptions`` for a target without a calibration."""

    name: str
    display: str = ""
    match: list = field(default_factory=list)
    source: str = ""
    peak_tflops: dict = field(default_factory=dict)
    hbm_gb_s: float = math.nan
    memory_gb: float = math.nan
    l2_mb: float = math.nan
    sm_count: int = 0
    tdp_w: float = math.nan
    kind: str = "gpu"
    vendor: str = "NVIDIA"
    date: str = ""
    unified_memory: bool = False
    estimates: list = field(default_factory=list)
    assumptions: dict = field(default_factory=dict)
    fitted: dict = field(default_factory=dict)

    def peak_flops(self, dtype: str) -> float:
        """Dense matmul peak for a model dtype in FLOP/s (NaN where the datasheet has none).

        fp32 models are counted against the plain fp32 peak: the zoo leaves TF32 off.
        """
        return float(self.peak_tflops.get(DTYPE_PEAK_KEY.get(dtype, dtype), math.nan)) * 1e12

    @property
    def peak_bytes_s(self) -> float:
        """Datasheet DRAM bandwidth in bytes/s."""
        return float(self.hbm_gb_s) * 1e9

    def describes(self, device: dict) -> bool:
        """Whether this spec may stand for ``device`` (``{"type", "name"}``) in a measured study:
        its ``match`` patterns name the device (a spec without patterns is the user's own
        description), or both are CPUs (a host CPU's name is not read: a CPU spec is the user's
        word for it)."""
        return (not self.match or any(re.search(p, device["name"]) for p in self.match)
                or (self.kind == "cpu" and device["type"] == "cpu"))


_POSITIVE = ("hbm_gb_s", "memory_gb", "l2_mb", "tdp_w")


def spec_from_config(d: dict) -> HardwareSpec:
    """A ``HardwareSpec`` from the command's ``hardware`` group (a spec file with any
    ``hardware.FIELD=...`` overrides), checked before any work.

    Raises:
        ValueError: an unknown field, a field of another type (``peak_tflops`` a mapping, ...),
            or a figure that is not a finite positive number (``hbm_gb_s``, ``memory_gb``,
            ``l2_mb``, ``tdp_w``, each ``peak_tflops`` entry; NaN: not stated),
            ``sm_count`` not a whole number >= 0, ``kind`` not gpu / cpu / npu, ``assumptions`` or
            ``fitted`` figures no price can rest on (``_check_model_figures``); each named as
            ``hardware.FIELD``.
    """
    d = dict(d)
    names = [f.name for f in dataclasses.fields(HardwareSpec)]
    if unknown := sorted(set(d) - set(names)):
        raise ValueError(f"unknown hardware field(s): {', '.join(unknown)}; a spec has: "
                         f"{', '.join(names)}")
    for k, kind in (("peak_tflops", dict), ("assumptions", dict), ("fitted", dict),
                    ("match", list), ("estimates", list), ("unified_memory", bool)):
        if k in d and not isinstance(d[k], kind):
            raise ValueError(f"hardware.{k}={d[k]!r} must be a {kind.__name__}")
    figures = {k: d[k] for k in _POSITIVE if k in d}
    figures.update({f"peak_tflops.{k}": v for k, v in (d.get("peak_tflops") or {}).items()})
    for k, v in figures.items():
        ok = (isinstance(v, int | float) and not isinstance(v, bool)
              and (math.isnan(v) or 0 < v < math.inf))
        if not ok:
            raise ValueError(f"hardware.{k}={v!r} must be a positive number (GB/s, GB, MB, W, "
                             "TFLOP/s)")
    sm = d.get("sm_count", 0)
    if not isinstance(sm, int) or isinstance(sm, bool) or sm < 0:
        raise ValueError(f"hardware.sm_count={sm!r} must be a whole number >= 0")
    if d.get("kind", "gpu") not in ("gpu", "cpu", "npu"):
        raise ValueError(f"hardware.kind={d['kind']!r} is not one of gpu, cpu, npu")
    _check_model_figures(d)
    return HardwareSpec(**d)


# the stated assumptions' and a public fit's figures: (low, high, low included); a price divides
# by the efficiencies and fractions, and a negative launch or interval priced a negative time
_RANGES = {"assumptions": {"compute_efficiency": (0, 1, False),
                           "bandwidth_efficiency": (0, 1, False),
                           "launch_us": (0, math.inf, True)},
           "fitted": {"per_layer_s": (0, math.inf, True), "fraction": (0, math.inf, False),
                      "dequant_bytes_per_weight": (0, math.inf, True),
                      "loo_half_width_pct": (0, math.inf, True)}}


def _check_model_figures(d: dict) -> None:
    """Refuse a spec's ``assumptions`` (efficiencies in (0, 1], ``launch_us`` >= 0) or ``fitted``
    stage figures (``fraction`` > 0, ``per_layer_s`` and ``dequant_bytes_per_weight`` >= 0,
    ``loo_half_width_pct`` >= 0) outside what a price can rest on.

    Raises:
        ValueError: naming ``hardware.assumptions.KEY`` / ``hardware.fitted.STAGE.KEY``."""
    blocks = [("assumptions", d.get("assumptions") or {}, _RANGES["assumptions"])]
    for stage in ("prefill", "decode"):
        f = (d.get("fitted") or {}).get(stage)
        if f is not None and not isinstance(f, dict):
            raise ValueError(f"hardware.fitted.{stage}={f!r} must be a mapping")
        blocks.append((f"fitted.{stage}", f or {}, _RANGES["fitted"]))
    for where, figures, ranges in blocks:
        for k, v in figures.items():
            if k not in ranges:
                continue
            lo, hi, closed = ranges[k]
            ok = (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                  and (lo <= v if closed else lo < v) and v <= hi)
            if not ok:
                raise ValueError(f"hardware.{where}.{k}={v!r} must be a number in "
                                 f"{'[' if closed else '('}{lo:g}, {hi:g}]")


def available() -> list[str]:
    """Names of the shipped specs."""
    return sorted(p.stem for p in HW_DIR.glob("*.yaml") if p.stem != "auto")


class UnknownHardware(KeyError, ValueError):
    """No such hardware spec: a ``KeyError`` for the code that looks specs up, a ``ValueError``
    (bad input: one ``error:`` line, exit code 2) for the command lines."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def load_spec(name: str, device_name: str | None = None) -> HardwareSpec:
    """Load spec ``name``; ``auto`` matches ``device_name`` against each spec's ``match`` patterns.

    Raises:
        UnknownHardware (a KeyError and a ValueError): unknown name, or no spec matches the
            device (the message lists the specs). ValueError: the file holds a field or figure
            ``spec_from_config`` refuses (named, with the file).
    """
    if name == "auto":
        if device_name is None:
            raise UnknownHardware("hardware=auto needs a device name")
        for n in available():
            spec = load_spec(n)
            if any(re.search(p, device_name) for p in spec.match):
                return spec
        raise UnknownHardware(f"no hardware spec matches device {device_name!r}; add one to "
                       f"conf/hardware/ or pick one of: {', '.join(available())}")
    path = HW_DIR / f"{name}.yaml"
    if not path.exists():
        raise UnknownHardware(f"unknown hardware spec {name!r}; known: "
                              f"{', '.join(available())}")
    try:  # a spec file is checked as a command's overrides are (whatif and advise read files)
        return spec_from_config(yaml.safe_load(path.read_text()))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path}: {e}") from None
