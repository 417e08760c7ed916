"""Who else uses the device while a trial measures: evidence taken just before and just after.

A design measured while another job shares its device measures that job too (tiny designs ran
2000-2400 tok/s alone and 125-141 tok/s beside another job on two CPU cores). Each measurement
holds the device's machine-wide lock (``sweep.common.locks.device_lock``: our own studies and
workers never measure at once), and ``measuring`` samples the device while this study is idle,
before and after the trial: on the CPU the cores other processes keep busy (``/proc/stat`` over
``WINDOW_S``), on a GPU the other processes holding a context on it and its utilization (NVML).
Past ``OTHER_CORES_MAX`` busy cores, any other GPU process, or ``GPU_UTIL_MAX`` % utilization,
the row is flagged ``contended`` with the evidence in ``contended_evidence``; ``compare`` and
``compare_fronts`` mark such figures and judge no regression on them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time

from ..common.locks import device_lock

WINDOW_S = 0.3  # how long each sample watches the device (s)
OTHER_CORES_MAX = 0.5  # busy cores (of other processes) a CPU measurement tolerates
GPU_UTIL_MAX = 5  # % utilization of a GPU while this study does not use it


def _cpu_times() -> tuple[float, float] | None:
    try:
        with open("/proc/stat") as f:
            v = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0.0)  # idle + iowait
    return sum(v[:8]), idle


def cpu_busy_cores(window_s: float = WINDOW_S) -> float | None:
    """Cores kept busy over ``window_s`` (this process idle meanwhile), or None off Linux."""
    a = _cpu_times()
    time.sleep(window_s)
    b = _cpu_times()
    if a is None or b is None or b[0] <= a[0]:
        return None
    busy = 1.0 - (b[1] - a[1]) / (b[0] - a[0])
    return max(0.0, busy) * (os.cpu_count() or 1)


def gpu_others(index: int, window_s: float = WINDOW_S) -> dict | None:
    """``{"pids": [...], "util_pct": ...}`` of GPU ``index`` (NVML): the processes with a compute
    context on it, and its utilization over ``window_s``; None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML, no driver: no evidence either way
        return None
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
        time.sleep(window_s)
        util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        return {"pids": [p for p in pids if p != os.getpid()], "util_pct": float(util)}
    except Exception:  # noqa: BLE001
        return None
    finally:
        pynvml.nvmlShutdown()


def sample(device: dict) -> str:
    """The evidence of another user of ``device`` now ("" when there is none)."""
    if device.get("type") == "cuda":
        g = gpu_others(int(device.get("index", 0)))
        if g and (g["pids"] or g["util_pct"] > GPU_UTIL_MAX):
            return (f"{len(g['pids'])} other process(es) on the GPU (pids {g['pids'][:5]}), "
                    f"utilization {g['util_pct']:.0f}%")
        return ""
    busy = cpu_busy_cores()
    if busy is not None and busy > OTHER_CORES_MAX:
        return f"{busy:.1f} of {os.cpu_count()} cores busy with other processes"
    return ""


@contextlib.contextmanager
def measuring(device: dict, log=print):
    """Hold ``device``'s lock for the ``with`` block and sample it before and after; yields a
    dict that ends holding ``contended`` (bool), ``contended_evidence``, and the block's wall
    clock ``measure_start`` / ``measure_end`` (ISO, UTC)."""
    out: dict = {}
    with device_lock(device, log):
        before = sample(device)
        out["measure_start"] = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        try:
            yield out
        finally:
            out["measure_end"] = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
            after = sample(device)
            said = [f"{w}: {e}" for w, e in (("before", before), ("after", after)) if e]
            out.update(contended=bool(said), contended_evidence="; ".join(said))
