"""The probes' decode timing: TPOT of a ``zoo.Generator`` after a prefill, in CUDA events."""

from __future__ import annotations

import torch


def tpot_runs(gen, prompt: torch.Tensor, steps: int, runs: int) -> list[float]:
    """Milliseconds per decode step of ``runs - 1`` timed runs (the first captures the graphs):
    each a prefill of ``prompt [B, T]`` from position 0, then ``steps`` greedy decode steps
    between two CUDA events."""
    times = []
    for rep in range(runs):
        gen.pos = 0
        tok = gen.prefill(prompt).argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(steps):
            tok = gen.decode_greedy(tok)
        z.record()
        z.synchronize()
        if rep:
            times.append(a.elapsed_time(z) / steps)
    return times
