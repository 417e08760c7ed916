"""Timers: CUDA events on a GPU, ``perf_counter`` after a synchronize on the CPU.

A timed region is enqueued between two events on the current stream; the elapsed time between the
events is what the device spent, including any gap in which it waited for the host to launch work
(launch overhead counts, as it does for a user).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from ..common.stats import percentile


class Timer:
    """Times callables on ``device`` (``cuda`` or ``cpu``). All results are in seconds."""

    def __init__(self, device: str):
        self.cuda = torch.device(device).type == "cuda"

    def sync(self) -> None:
        """Wait for the queued CUDA work (``torch.cuda.synchronize``); nothing on the CPU."""
        if self.cuda:
            torch.cuda.synchronize()

    def repeat(self, fn: Callable[[], object], warmup: int, repeats: int) -> list[float]:
        """Run ``fn`` ``warmup`` times untimed, then return ``repeats`` timings (s)."""
        for _ in range(warmup):
            fn()
        self.sync()
        out = []
        for _ in range(repeats):
            out.append(self.steps([fn])[0])
        return out

    def steps(self, fns: list[Callable[[], object]]) -> list[float]:
        """Run ``fns`` back to back and return each one's time (s), with one sync at the end.

        On CUDA, one event is recorded between consecutive calls, so the host never waits inside
        the sequence (as in real generation) and each interval is the device time of one call.
        """
        if self.cuda:
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(fns) + 1)]
            ev[0].record()
            for fn, e in zip(fns, ev[1:]):
                fn()
                e.record()
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(ev, ev[1:])]
        out = []
        t0 = time.perf_counter()
        for fn in fns:
            fn()
            t1 = time.perf_counter()
            out.append(t1 - t0)
            t0 = t1
        return out


def spread(ts: list[float]) -> dict:
    """Median, min, p10, p90 and max of ``ts`` (same unit as ``ts``; the percentiles of
    ``sweep.common.stats``)."""
    s = sorted(ts)
    return {"median": statistics.median(s), "min": s[0], "p10": percentile(s, 10),
            "p90": percentile(s, 90), "max": s[-1], "n": len(s)}
