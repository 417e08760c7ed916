"""The device's measured ceilings: ``python -m sweep.measure.ceilings OUT.json [--device D]``.

A large device-to-device copy for the bandwidth (bytes read plus bytes written) and a large GEMM
per dtype for the FLOP/s, in a child process of their own (``run``): the caller keeps no CUDA
context. On a GPU also the sustained bf16 GEMM rate: the same GEMM back to back for
``SUSTAIN_S`` from idle, as a long prefill's repeats run; at the board's power limit the clocks
drop (H100 SXM, 700 W: SM clock 1980 -> ~1400 MHz after ~0.1 s, NVML clock-event reason
"SW power cap"; ``results/reference/power_probe.md``), so a compute-bound kernel timed in a short
burst runs slower inside a long stage. ``gemm_flops_bf16_sustained`` is the rate over a run's
second half, ``power_onset_s`` the busy time after which the calls slow down, each the median of
``SUSTAIN_RUNS`` runs. A stage that is part memory-bound draws less power and slows its GEMMs
less: ``power_slowdown_by_duty`` holds ``[duty, slow-down]`` of the same GEMM alternating with
copies at ``POWER_DUTIES`` (the GEMM's share of the busy time, from their burst times).
``sweep.caches.ceiling_cache.measure_ceilings`` caches what this measures and gives every
MFU and MBU its "measured" peak.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from .child import ChildTimeout, launch, log_tail, progress_line


def measure(device: str) -> dict:
    """``{"copy_bytes_s", "gemm_flops_<dtype>", their ``_spread`` [min, max], "method"}`` on
    ``device`` (``cuda``: a 1 GiB copy, 8192^3 GEMMs in bf16, fp16, fp32; ``cpu``: 64 MiB,
    1024^3 fp32 and bf16: the bound of a full-size bf16 design's prefills, ``check_time``; not
    fp16, which a CPU without fp16 units computes at ~1 GFLOP/s, 2 s a call)."""
    from .timing import Timer

    timer = Timer(device)
    out: dict = {"method": {}}
    if device == "cuda":
        n_copy, gemm = 1 << 30, {"bf16": 8192, "fp16": 8192, "fp32": 8192}
    else:
        n_copy, gemm = 1 << 26, {"fp32": 1024, "bf16": 1024}
    if device == "cuda":  # out of idle first: see _ramp
        progress_line("phase", f"loading the GPU for {RAMP_S:g} s, then {IDLE_S:g} s idle")
        _ramp(gemm["bf16"])
    progress_line("phase", "measuring the copy bandwidth")
    out.update(_copy_rate(timer, n_copy, device))
    out["method"]["copy"] = (f"dst.copy_(src) of {n_copy} bytes; read + write counted; median "
                             f"of {3 if device == 'cuda' else 1} readings' medians of 10")
    for dt, n in gemm.items():
        progress_line("phase", f"measuring the {dt} GEMM rate")
        out.update(_gemm_rate(timer, n, dt, device))
        out["method"][f"gemm_{dt}"] = (f"{n}x{n}x{n} matmul of random data; median of "
                                       f"{READINGS if device == 'cuda' else 1} readings' medians "
                                       f"of 5, {PAUSE_S:g} s apart")
    if device == "cuda":
        progress_line("phase", f"measuring the sustained bf16 GEMM rate ({SUSTAIN_RUNS} x "
                               f"{SUSTAIN_S:g} s)")
        out.update(median_profile([_sustained(8192, out["gemm_flops_bf16"])
                                   for _ in range(SUSTAIN_RUNS)]))
        out["method"]["gemm_bf16_sustained"] = (
            f"8192^3 bf16 matmul in a CUDA graph replayed back to back for {SUSTAIN_S:g} s after "
            f"{IDLE_S:g} s idle, {SUSTAIN_RUNS} runs; rate: median call over each run's second "
            "half; onset: busy time when the median of 9 calls first passes half the slow-down; "
            "each the median over the runs")
        progress_line("phase", f"measuring the GEMM's slow-down between copies ({len(POWER_DUTIES)}"
                               f" x {SUSTAIN_S:g} s)")
        gemm_s = 2 * gemm["bf16"] ** 3 / out["gemm_flops_bf16"]
        out["power_slowdown_by_duty"] = [_mixed(gemm["bf16"], gemm_s, d) for d in POWER_DUTIES]
        out["method"]["power_slowdown_by_duty"] = (
            f"the sustained GEMM's graph alternating with copy_ graphs of {MIX_COPY_BYTES} bytes, "
            f"as many as give the GEMM the duty (its share of the burst times), back to back "
            f"for {SUSTAIN_S:g} s after {IDLE_S:g} s idle; slow-down: the GEMM's median call over "
            "the second half against its burst time")
    return out


SUSTAIN_S, IDLE_S, RAMP_S = 1.5, 1.0, 0.25
# Sustained runs whose rate and onset are taken as their medians: eight single runs on one H100
# (2026-11-27, results/reference/ceilings_same_h100.json) read the slow-down (burst / sustained)
# 1.05-1.13 and the onset 0.03-0.15 s, which moved a compute-bound prefill's price by ~5%
SUSTAIN_RUNS = 3
# Burst rates as the median of READINGS short readings PAUSE_S apart: one reading of the bf16
# GEMM varied 743-775 TFLOP/s between six back-to-back measurements on one H200 (4%, no trend
# in the idle before it: results/reference/predict_h200_from_h100_v3/ceilings_probe_h200.json),
# and one reading of its copy 3.85-4.21 TB/s between machines; the transfer of a calibration to
# another device is a ratio of these (``sweep.analysis.predict.transfer``)
READINGS, PAUSE_S = 5, 0.2
# Duties of the mixed runs: on an H100 SXM the GEMM slowed 1.16 / 1.15 / 1.10 / 1.02 / 1.01 at
# duties 1 / 0.88 / 0.72 / 0.49 / 0.30 (bench.power_mix_probe, 2026-12-06,
# results/reference/power_probe.md): the bend lies between 0.5 and 0.9
POWER_DUTIES, MIX_COPY_BYTES = (0.5, 0.75), 256 << 20


def _ramp(n: int) -> None:
    """Load a GPU just out of idle: an ``n``-cubed bf16 GEMM back to back for ``RAMP_S``, then
    ``IDLE_S`` idle (the power limit's window recovers; the clocks stay up). Timed straight from
    idle, an H100 machine's first calibration read its bf16 GEMM at 682 TFLOP/s, below its fp16
    767 and 15% below the 799 measured minutes later on the same machine
    (``results/reference/predict_h100_v3``), and never saw the power limit's onset."""
    import time

    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    t_end = time.perf_counter() + RAMP_S
    while time.perf_counter() < t_end:
        for _ in range(8):
            torch.mm(a, a, out=c)
        torch.cuda.synchronize()
    del a, c
    time.sleep(IDLE_S)


def _sustained(n: int, burst_flops: float) -> dict:
    """``gemm_flops_bf16_sustained`` (FLOP/s) and ``power_onset_s`` (s) of an ``n``-cubed bf16
    GEMM run back to back for ``SUSTAIN_S`` from ``IDLE_S`` of idle (``sustained_profile``)."""

    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    g = capture(lambda: torch.mm(a, b, out=c))
    calls, _ = alternate(g, None, 0, rounds=8)
    del g
    return sustained_profile(calls, 2 * n**3, burst_flops)


def _mixed(n: int, gemm_s: float, duty: float) -> list[float]:
    """``[duty, slow-down]``: an ``n``-cubed bf16 GEMM (burst time ``gemm_s``, s) alternating with
    ``k`` copies of ``MIX_COPY_BYTES`` (``k`` for ``duty``, the GEMM's share of the burst times;
    the duty returned is the one ``k`` gives), back to back for ``SUSTAIN_S`` from ``IDLE_S`` of
    idle; the slow-down is the GEMM's median call over the second half against ``gemm_s``."""

    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    src = torch.randn(MIX_COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    gemm, copy = capture(lambda: torch.mm(a, b, out=c)), capture(lambda: dst.copy_(src))
    copy_s = statistics.median(replay_times([copy] * 20))
    k = max(1, round(gemm_s * (1 - duty) / (duty * copy_s)))
    calls, _ = alternate(gemm, copy, k)
    del gemm, copy
    late = calls[len(calls) // 2:]
    return [gemm_s / (gemm_s + k * copy_s), max(statistics.median(late) / gemm_s, 1.0)]


def alternate(gemm, copy, k: int, rounds: int = 4) -> tuple[list[float], list[float]]:
    """The times (s) of graph ``gemm``'s calls and of graph ``copy``'s, replayed ``gemm`` then
    ``k`` x ``copy``, ``rounds`` times between syncs, back to back for ``SUSTAIN_S`` after
    ``IDLE_S`` of idle (``k = 0``: the GEMM alone)."""
    import time

    time.sleep(IDLE_S)
    tg, tc, t_end = [], [], time.perf_counter() + SUSTAIN_S
    while time.perf_counter() < t_end:
        seq = ([gemm] + [copy] * k) * rounds
        for g, t in zip(seq, replay_times(seq)):
            (tg if g is gemm else tc).append(t)
    return tg, tc


def capture(fn):
    """``fn`` run once, then captured in a CUDA graph (returned)."""
    import torch

    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def replay_times(graphs: list) -> list[float]:
    """Each graph of ``graphs`` replayed back to back, its time (s) from CUDA events."""
    import torch

    ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(graphs) + 1)]
    ev[0].record()
    for g, e in zip(graphs, ev[1:]):
        g.replay()
        e.record()
    ev[-1].synchronize()
    return [x.elapsed_time(y) / 1e3 for x, y in zip(ev, ev[1:])]


def median_profile(runs: list[dict]) -> dict:
    """The sustained rate and the onset of several ``sustained_profile`` runs, each the median
    over the runs; the rate's spread the runs' extremes."""
    rate = [r["gemm_flops_bf16_sustained"] for r in runs]
    return {"gemm_flops_bf16_sustained": statistics.median(rate),
            "gemm_flops_bf16_sustained_spread": [min(r["gemm_flops_bf16_sustained_spread"][0]
                                                     for r in runs),
                                                 max(r["gemm_flops_bf16_sustained_spread"][1]
                                                     for r in runs)],
            "power_onset_s": statistics.median(r["power_onset_s"] for r in runs)}


def sustained_profile(calls: list[float], flop: float, burst_flops: float) -> dict:
    """From the times (s) of one GEMM of ``flop`` FLOP run back to back from idle, and its rate
    timed in a short burst (``burst_flops``, FLOP/s): ``gemm_flops_bf16_sustained`` (median call
    of the second half; never above the burst rate), ``power_onset_s`` (the busy time, summed
    call times, at which the median of 9 consecutive calls first exceeds the burst time by half
    the sustained slow-down; the run's length when it never does) and the spread of the
    second half's rate."""
    import numpy as np

    t = np.asarray(calls, float)
    late = t[len(t) // 2:]
    burst = flop / burst_flops
    slow = max(float(np.median(late)), burst)
    out = {"gemm_flops_bf16_sustained": flop / slow,
           "gemm_flops_bf16_sustained_spread": [flop / float(late.max()), flop / float(late.min())]}
    busy = np.cumsum(t)
    k = 9
    if slow <= burst * 1.01 or len(t) < k:
        out["power_onset_s"] = float(busy[-1]) if len(t) else 0.0
        return out
    roll = np.array([np.median(t[i:i + k]) for i in range(len(t) - k + 1)])
    past = np.nonzero(roll > burst + (slow - burst) / 2)[0]
    out["power_onset_s"] = float(busy[past[0]]) if len(past) else float(busy[-1])
    return out


def copy_rate(device: str, n_bytes: int = 1 << 30) -> dict:
    """``{"copy_bytes_s", "copy_bytes_s_spread", "copy_bytes_s_readings"}`` (bytes/s, read +
    write counted) of ``dst.copy_(src)`` over ``n_bytes`` of float32 on ``device``, measured here
    as ``measure`` does (no ramp first): for probes that report against the copy bandwidth."""
    from .timing import Timer

    return _copy_rate(Timer(device), n_bytes, device)


def _copy_rate(timer, n_bytes: int, device: str) -> dict:
    import torch

    src = torch.randn(n_bytes // 4, device=device)  # float32 elements: n_bytes bytes
    dst = torch.empty_like(src)
    reads = _readings(timer, lambda: dst.copy_(src), 3 if device == "cuda" else 1, 3, 10)
    return _rate("copy_bytes_s", 2 * n_bytes, reads)


def _gemm_rate(timer, n: int, dt: str, device: str) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dt]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    reads = _readings(timer, lambda: a @ b, READINGS if device == "cuda" else 1, 2, 5)
    return _rate(f"gemm_flops_{dt}", 2 * n**3, reads)


def _readings(timer, fn, n: int, warmup: int, repeats: int) -> list[list[float]]:
    """``n`` short readings of ``fn`` (``warmup`` untimed calls, then ``repeats`` timed, s),
    ``PAUSE_S`` apart: each well inside the power limit's onset, so a burst rate."""
    import time

    out = []
    for i in range(n):
        if i:
            time.sleep(PAUSE_S)
        out.append(timer.repeat(fn, warmup=warmup, repeats=repeats))
    return out


def _rate(name: str, work: float, reads: list[list[float]]) -> dict:
    """``{name: work / the median of the readings' median times, name_spread: [min, max]
    rate over every call, name_readings: each reading's rate}`` (work in bytes or FLOP)."""
    each = [statistics.median(r) for r in reads]
    every = [t for r in reads for t in r]
    return {name: work / statistics.median(each),
            f"{name}_spread": [work / max(every), work / min(every)],
            f"{name}_readings": [work / t for t in each]}


def run(device_type: str, timeout_s: float = 300.0, on_line=None) -> dict:
    """The ceilings of this machine's ``device_type`` device, measured in a child process.

    Raises:
        RuntimeError: the child failed or timed out (its log tail in the message).
    """
    with tempfile.TemporaryDirectory(prefix="designzoo-ceilings-") as d:
        out, log = Path(d) / "ceilings.json", Path(d) / "log.txt"
        cmd = [sys.executable, "-m", "sweep.measure.ceilings", str(out), "--device", device_type]
        try:
            rc = launch(cmd, log, timeout_s, on_line=on_line)
        except ChildTimeout as e:
            raise RuntimeError(f"ceilings measurement {e}") from None
        if rc != 0 or not out.exists():
            raise RuntimeError(f"ceilings measurement failed: {log_tail(log, 500)}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    import argparse

    from ..common.env import detect_device, environment
    from .parent import watch_parent

    ap = argparse.ArgumentParser(description="(child) measure this device's ceilings into OUT")
    ap.add_argument("out")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    a = ap.parse_args(argv)
    watch_parent()
    dev = detect_device(a.device)
    res = measure(dev["type"])
    res["env"] = environment(dev)
    Path(a.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
