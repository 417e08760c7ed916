"""Timing a kernel as the decode step runs it: replayed inside a CUDA graph.

Launched from Python, a microsecond kernel times the host's launch, not the GPU; inside a graph
it times as the captured decode step runs it. ``graph_bench`` is the autotuners' ``do_bench``
(``kernels.gemv``, ``kernels.decode_attention``); ``time_ms`` times one call for
``kernels.decode_linear.choose`` (Triton GEMV or cuBLAS) and the bench.

Cold (``switches.cold_tune``, or ``cold=True``): in the decode step every weight and KV tile
comes from DRAM (a step reads gigabytes; the 50 MB L2 of an H100 keeps none of it between
layers), but a kernel replayed back to back on the same small weight finds it in L2, and a tile
choice tuned that way is tuned for the wrong memory. Cold timing reads a buffer of 2.5x the L2
before each call (a read: no dirty lines left to write back during the timed kernel) and
subtracts a graph of the reads alone, timed the same way. The read takes ~40 us (125 MB at
~3 TB/s) against a decode kernel's few, so the difference carries the reads' spread: medians of
5 replays of 20 rounds each (an estimate of a few percent of a 5 us kernel). Measured on the
H100 (`results/reference/bench_h100_v3_dev/`): no gain at batch 1 (Llama-3.2-1B 883.1 -> 883.5
tok/s, Llama-3.1-8B 180.9 -> 180.8, within the spread), so it stays off. The buffer stays
allocated for the process and so counts in a cold-tuned run's ``peak_mem_bytes``.
"""

from __future__ import annotations

import statistics

import torch
import triton

from . import switches

_FLUSH: dict = {}


def cold_default() -> bool:
    """Whether the autotuners time cold (``switches.cold_tune``; off by default: measured no
    faster on the H100, see the module's text)."""
    return switches.current().cold_tune


def _flush(device: torch.device):
    """A read of 2.5x the device's L2 (bytes) into a preallocated scalar: one kernel."""
    if device not in _FLUSH:
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        buf = torch.ones(int(2.5 * l2) // 2, dtype=torch.float16, device=device)
        _FLUSH[device] = (buf, torch.empty((), dtype=torch.float16, device=device))
    buf, out = _FLUSH[device]
    return lambda: torch.amax(buf, dim=0, out=out)


def _replay_ms(calls, reps: int) -> float:
    """Median over 5 replays of a graph of ``reps`` rounds of ``calls``, in ms per round."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            for c in calls:
                c()
    g.replay()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / reps)
    del g
    return statistics.median(times)


def time_ms(fn, reps: int = 20, cold: bool | None = None) -> float:
    """Milliseconds per call of ``fn`` replayed in a CUDA graph of ``reps`` calls (median of 5
    replays, after 3 eager warm-ups on a side stream). ``cold`` (default ``cold_default()``):
    each call after a read of 2.5x the L2, whose own time is subtracted (floored at 1 ns)."""
    cold = cold_default() if cold is None else cold
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    if not cold:
        return _replay_ms([fn], reps)
    flush = _flush(torch.device("cuda", torch.cuda.current_device()))
    return max(_replay_ms([flush, fn], reps) - _replay_ms([flush], reps), 1e-6)


def graph_bench(fn, quantiles=None, rep: int = 10):
    """The autotuners' ``do_bench``: milliseconds per call of ``fn`` inside a CUDA graph (Triton's
    ``do_bench_cudagraph``, or ``time_ms`` cold when ``cold_default()``); a list for
    ``quantiles``. The device is synchronized first: the benchmark runs on a stream of its own,
    which must not overlap work still queued on the caller's (a workspace being zeroed, a kernel
    using it)."""
    torch.cuda.synchronize()
    if not cold_default():
        return triton.testing.do_bench_cudagraph(fn, rep=rep, quantiles=quantiles)
    t = time_ms(fn, reps=20, cold=True)
    return [t] * len(quantiles) if quantiles else t
