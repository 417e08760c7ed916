"""Nsight Systems per stage: build the ``nsys profile`` command, analyse its SQLite export.

The trial's child runs once more per stage under ``nsys profile`` (an argument list) with the
``cuda,nvtx,osrt,cublas`` traces and the capture range set by ``cudaProfilerStart/Stop``
(``--capture-range=cudaProfilerApi``): the child brackets the prefill or decode steps ``A..B`` as
for Nsight Compute, so the report holds that window only. ``--export=sqlite`` writes the SQLite
database next to the report; ``analyse`` reads it with the tables and columns Nsight Systems
documents ("Exporter Data Model" in the Nsight Systems User Guide):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` (``start``, ``end`` in ns, ``deviceId``, ``streamId``,
  ``correlationId``, ``globalPid``, ``shortName``/``demangledName`` -> ``StringIds.id``),
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` (``start``, ``end``, ``globalTid``, ``correlationId``: the launch
  call of each kernel on the host),
- ``NVTX_EVENTS`` (``start``, ``end``, ``eventType`` 59 = push/pop range, ``text`` or ``textId`` ->
  ``StringIds``, ``globalTid``),
- ``StringIds`` (``id``, ``value``).

Kernel time per NVTX range is attributed through the launch: a kernel belongs to every range open
on the launching thread when its runtime call started (the projection Nsight Systems' own
``nvtx_gpu_proj_sum`` report makes).
"""

from __future__ import annotations

import math
import shutil
import sqlite3
from pathlib import Path

from .child import child_failure, run_child
from .torch_prof import timeline

NVTX_PUSH_POP = 59
NVTX_START_END = 60


def available(nsys: str = "nsys") -> str | None:
    """None if ``nsys`` can be run, else the reason it cannot."""
    if shutil.which(nsys):
        return None
    return (f"{nsys} not found on PATH: Nsight Systems is not installed on this machine "
            "(install it from https://developer.nvidia.com/nsight-systems, or use profile=torch "
            "for the kernel timeline and profile=ncu for per-kernel counters)")


def command(report: str | Path, capture: str = "cudaProfilerApi", nvtx_range: str | None = None,
            nsys: str = "nsys") -> list[str]:
    """The ``nsys profile`` argument list to put before the child's own command.

    Args:
        report: output path without extension (``.nsys-rep`` and ``.sqlite`` are written).
        capture: ``cudaProfilerApi`` (the child's ``cudaProfilerStart/Stop``) or ``nvtx`` (the
            first NVTX range named ``nvtx_range``, e.g. ``decode``).

    Raises:
        ValueError: unknown capture kind, or ``nvtx`` without a range name.
    """
    cmd = [nsys, "profile", "--trace", "cuda,nvtx,osrt,cublas", "--sample", "none",
           "--cpuctxsw", "none", "--output", str(report), "--force-overwrite", "true",
           "--export", "sqlite"]
    if capture == "cudaProfilerApi":
        cmd += ["--capture-range", "cudaProfilerApi", "--capture-range-end", "stop"]
    elif capture == "nvtx":
        if not nvtx_range:
            raise ValueError("capture=nvtx needs nvtx_range (e.g. 'decode')")
        cmd += ["--capture-range", "nvtx", "--nvtx-capture", nvtx_range,
                "--env-var", "NSYS_NVTX_PROFILER_REGISTER_ONLY=0", "--capture-range-end", "stop"]
    else:
        raise ValueError(f"capture={capture!r} is not cudaProfilerApi or nvtx")
    return cmd


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def analyse(sqlite_path: str | Path, stage: str, steps: int = 1) -> dict:
    """Row columns from an ``nsys`` SQLite export of one stage window.

    Returns:
        ``{stage}_nsys_kernels`` (per step), ``{stage}_nsys_gpu_active_pct``,
        ``{stage}_nsys_gpu_gaps`` (per step), ``_gap_median_us``, ``_gap_p90_us``,
        ``_gap_max_us``, ``{stage}_nsys_kernel_ms`` (summed kernel time per step) and
        ``{stage}_nsys_range_ms``: ``{range name: kernel ms per step}`` for every NVTX push/pop
        range that launched kernels (a kernel counts toward each enclosing range).

    Raises:
        ValueError: the file is not an nsys export with kernel activity (names what is missing).
    """
    db = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    try:
        have = _tables(db)
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in have:
            raise ValueError(f"{sqlite_path}: no CUPTI_ACTIVITY_KIND_KERNEL table (no kernels "
                             "captured; was the capture range entered?)")
        kernels = db.execute("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                             "ORDER BY start").fetchall()
        tl = timeline([(s, e) for s, e, _ in kernels])
        p = f"{stage}_nsys_"
        out = {p + "kernels": len(kernels) / steps, p + "gpu_active_pct": tl["active_pct"],
               p + "gpu_gaps": tl["gaps"] / steps,
               p + "gpu_gap_median_us": tl["gap_median"] / 1e3,
               p + "gpu_gap_p90_us": tl["gap_p90"] / 1e3, p + "gpu_gap_max_us": tl["gap_max"] / 1e3,
               p + "kernel_ms": sum(e - s for s, e, _ in kernels) / 1e6 / steps}
        ranges: dict[str, float] = {}
        if {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= have:
            strings = "StringIds" in have
            text = ("COALESCE(n.text, s.value)" if strings else "n.text")
            join = "LEFT JOIN StringIds s ON s.id = n.textId" if strings else ""
            rows = db.execute(f"""
                SELECT {text}, k.end - k.start
                FROM CUPTI_ACTIVITY_KIND_KERNEL k
                JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                JOIN NVTX_EVENTS n ON n.globalTid = r.globalTid AND n.eventType = ?
                     AND n.start <= r.start AND (n.end IS NULL OR r.start <= n.end)
                {join}""", (NVTX_PUSH_POP,)).fetchall()
            for name, dur in rows:
                if name:
                    ranges[name] = ranges.get(name, 0.0) + dur / 1e6 / steps
        out[p + "range_ms"] = {k: round(v, 6) for k, v in sorted(ranges.items(),
                                                                  key=lambda kv: -kv[1])}
        if not ranges:
            out[p + "range_ms_reason"] = "no NVTX ranges in the capture (profile.nvtx off?)"
        return out
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{sqlite_path}: not a readable nsys SQLite export ({e})") from e
    finally:
        db.close()


def nan_row(stage: str, why: str) -> dict:
    """The stage's nsys columns as NaN with ``why``."""
    return {f"{stage}_nsys_gpu_active_pct": math.nan, f"{stage}_nsys_reason": why}


def wanted(profile: dict) -> bool:
    """Whether the trial's ``profile`` asks for Nsight Systems."""
    return bool(profile.get("nsys"))


def profile_trial(spec: dict, trial_dir: Path, cfg, workload: dict, ceilings: dict) -> dict:
    """Per-stage Nsight Systems figures of one trial: one child run per stage window under
    ``nsys profile``, its SQLite export analysed; ``{stage}_nsys_reason`` on failure. Arguments
    as ``sweep.measure.ncu.profile_trial``."""
    out = {}
    for stage in ("prefill", "decode"):
        d = trial_dir / f"nsys_{stage}"
        d.mkdir(parents=True, exist_ok=True)
        res = run_child(dict(spec, profile_window=stage, mode="eager"), d,
                        workload.get("timeout_s", 900.0), wrapper=command(d / "report"))
        try:
            if res.get("status") != "ok":
                raise ValueError(child_failure(res))
            out.update(analyse(d / "report.sqlite", stage, res["measured"]["profiled_steps"]))
        except (ValueError, OSError, KeyError) as e:
            out.update(nan_row(stage, f"nsys failed: {e}"[:600]))
    return out
