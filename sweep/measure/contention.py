"""Who else uses the device while a trial measures: evidence taken just before and just after.

A design measured while another job shares its device measures that job too (tiny designs ran
2000-2400 tok/s alone and 125-141 tok/s beside another job on two CPU cores). Each measurement
holds the device's machine-wide lock (``sweep.common.locks.device_lock``: our own studies and
workers never measure at once), and ``measuring`` samples the device while this study is idle,
before and after the trial: on the CPU the cores other processes keep busy (``/proc/stat`` over
``WINDOW_S``), on a GPU the other processes holding a context on it and its utilization (NVML).
On the CPU it also accounts for the whole measurement (``during``): the machine's busy time over
the block less the CPU time of this process and its descendants (``/proc/<pid>/stat``, with the
children they waited for), so a job that started and ended inside a trial is seen too (a design
measured 17x slow beside one went unflagged by the two samples alone).
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
OWN_SLACK = 0.03  # ``during``: and this share of the cores the measurement itself kept busy
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


def _own_ticks() -> float | None:
    """CPU time, in clock ticks, of this process and every descendant (``utime + stime`` and
    ``cutime + cstime``: a child's time moves into its parent's when it is waited for, so nothing
    of this tree is lost when a trial's child ends), or None off Linux."""
    kids: dict[int, list[int]] = {}
    ticks: dict[int, float] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        try:  # fields after the command: state ppid ... utime(12) stime cutime cstime
            kids.setdefault(int(fields[1]), []).append(int(name))
            ticks[int(name)] = sum(float(x) for x in fields[11:15])
        except (IndexError, ValueError):
            continue
    me = os.getpid()
    if me not in ticks:
        return None
    total, todo = 0.0, [me]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0.0)
        todo.extend(kids.get(pid, ()))
    return total


def mark(device: dict) -> tuple | None:
    """The start of a ``during`` account on a CPU ``device`` (None on a GPU, or off Linux)."""
    if device.get("type") == "cuda":
        return None
    a, own = _cpu_times(), _own_ticks()
    return None if a is None or own is None else (time.monotonic(), a, own)


def during(start: tuple | None) -> str:
    """The evidence of other processes' use of the CPU since ``mark``'s ``start``: the cores kept
    busy on average over the block by processes other than this one and its descendants, past
    ``OTHER_CORES_MAX`` and ``OWN_SLACK`` of the tree's own ("" under them, for a block shorter
    than a second, or without a mark). A descendant that leaves the tree (a daemon reparented to
    init) counts as another process from then on."""
    if start is None:
        return ""
    t0, a, own0 = start
    b, own1 = _cpu_times(), _own_ticks()
    wall = time.monotonic() - t0
    if b is None or own1 is None or wall < 1.0 or b[0] <= a[0]:
        return ""
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    n = os.cpu_count() or 1
    busy = (b[0] - a[0]) - (b[1] - a[1])  # ticks summed over the CPUs
    per_cpu = (b[0] - a[0]) / n / hz  # the window as /proc/stat counted it (s)
    window = max(per_cpu, wall)
    others = max(0.0, busy - (own1 - own0)) / hz / window
    # the two clocks disagree by a share of what the tree ran (ticks against runtime, interrupt
    # time counted busy): past that share of the tree's own cores too, not only the fixed bound
    if others > max(OTHER_CORES_MAX, OWN_SLACK * (own1 - own0) / hz / window):
        return f"{others:.1f} of {n} cores busy with other processes (mean over {wall:.0f} s)"
    return ""


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
    """Hold ``device``'s lock for the ``with`` block and sample it before and after (and account
    for it throughout on the CPU: ``during``); yields a
    dict that ends holding ``contended`` (bool), ``contended_evidence``, and the block's wall
    clock ``measure_start`` / ``measure_end`` (ISO, UTC)."""
    out: dict = {}
    with device_lock(device, log):
        before = sample(device)
        out["measure_start"] = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        start = mark(device)
        try:
            yield out
        finally:
            inside = during(start)
            out["measure_end"] = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
            after = sample(device)
            said = [f"{w}: {e}" for w, e in (("before", before), ("during", inside),
                                              ("after", after)) if e]
            out.update(contended=bool(said), contended_evidence="; ".join(said))
