"""The fixed costs of the performance model (``sweep.measure.calibration_run``'s ``launch`` group):
one tiny kernel inside a CUDA graph, one tiny op issued eagerly, one graph launch, the host's
cost to issue a layer of the zoo's model eagerly, the host's cost of one graphed decode step as a
trial runs it, and the idle gap between two kernels replayed in a graph. Times in s."""

from __future__ import annotations

import gc
import statistics
import time

from .microbench import entry


def launch(device, tm) -> list[dict]:
    """Fixed costs: one tiny kernel in a CUDA graph, one tiny op issued eagerly by the host,
    one graph launch (s each)."""
    import torch

    from .timing import spread

    x = torch.zeros(16, device=device)
    rows = []
    n = 200

    def eager():
        for _ in range(n):
            x.add_(1)

    eager()  # the first ops load the kernels
    if device == "cuda":
        torch.cuda.synchronize()
    ts = []
    for _ in range(7):  # 7 readings of n ops each, their spread kept
        t0 = time.perf_counter()
        eager()
        if device == "cuda":
            torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / n)
    rows.append(entry("launch", spread(ts), op="eager_op"))
    if device == "cuda":
        rows.append(entry("launch", tm(lambda: x.add_(1), n=n), op="graph_kernel"))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.add_(1)
        ts = []
        for _ in range(50):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            g.replay()
            ts.append(time.perf_counter() - t0)
        rows.append(entry("launch", spread(ts), op="graph"))
    else:
        rows.append(entry("launch", spread([0.0]), op="graph"))
    from kernels import switches

    for impl in ("torch", "triton") if device == "cuda" else ("torch",):
        for stage, suffix in (("decode", ""), ("prefill", "_prefill")):
            with switches.use(autotune=False):  # the host's cost, not the tiles: no tuning here
                per_layer, fixed = _eager_host(device, impl, stage)
            rows.append(entry("launch", per_layer, op=f"eager_layer_{impl}{suffix}"))
            rows.append(entry("launch", fixed, op=f"eager_fixed_{impl}{suffix}"))
        if device == "cuda":
            with switches.use(autotune=False):
                rows.append(entry("launch", _graph_step_host(impl), op=f"graph_step_{impl}"))
    return rows


def _graph_step_host(impl: str, steps: int = 200) -> dict:
    """The spread (s) of one graphed decode step's wall time on a model whose GPU work is
    negligible (``tiny``, 2 layers, batch 1, mode cudagraph), each step as a trial runs it
    (``Generator.decode`` then the argmax of its logits, no sync between steps): the host's
    floor under a graphed step (copy the token in, fill the position, replay, clone the
    logits, argmax). Median of 7 runs of ``steps`` steps."""
    import torch

    from zoo import Generator, ModelConfig, Transformer

    from .timing import spread

    cfg = ModelConfig.from_name("tiny", n_layers=2, kernels=impl, dtype="bf16", kv_dtype="bf16")
    gen = Generator(Transformer.build(cfg, "cuda"), 1, steps + 8, "cudagraph")
    tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")
    gen.prefill(torch.zeros(1, 4, dtype=torch.long, device="cuda"))
    for _ in range(4):  # capture the step's graph
        tok = gen.decode_greedy(tok)
    gc.collect()
    gc.disable()
    ts = []
    for _ in range(7):
        gen.pos = 4
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            tok = gen.decode_greedy(tok)
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / steps)
    gc.enable()
    return spread(ts)


def graph_gap(device) -> list[dict]:
    """The ``graph_gap`` launch entry (``graph_gap_of``), empty on the CPU. Measure it last: once
    torch.profiler (CUPTI) has run in a process, its small kernels time 1.2-2.7x slower (H100)."""
    import torch

    if device != "cuda":
        return []
    x = torch.zeros(16, device=device)
    gap = graph_gap_of(lambda: x.add_(1))
    return [] if gap is None else [entry("launch", {"median": gap, "min": gap, "p90": gap},
                                         op="graph_gap")]


def graph_gap_of(fn, n: int = 200, per: int = 1) -> float | None:
    """Idle time (s) between two dependent kernels replayed in a CUDA graph: a graph of ``n``
    calls of ``fn`` (``per`` kernels each; ``graph_gap``: one tiny kernel) under torch.profiler,
    ``(span - sum of kernel durations) / (kernels - 1)``; None where the profiler records fewer
    than half the kernels. Every calibrated time includes one such gap per kernel; the
    predictor books them as launch overhead."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        g.replay()
        torch.cuda.synchronize()
    ks = sorted((e.time_range.start, e.time_range.end) for e in p.events()
                if e.device_type.name == "CUDA")
    if len(ks) < n * per // 2:
        return None
    busy = sum(e - s for s, e in ks)
    return max(ks[-1][1] - ks[0][0] - busy, 0.0) / (len(ks) - 1) / 1e6


def _eager_host(device: str, impl: str, stage: str = "decode", rounds: int = 5,
                forwards: int = 10) -> tuple[dict, dict]:
    """Host time (s) to issue one layer, and the rest of a forward (embedding, final norm, LM
    head), of the zoo's model run eagerly: forwards of a one-token decode step (``stage``
    ``decode``) or a 16-token prefill from position 0 (``prefill``: its own ops, SDPA and the
    cache write) on a model of tiny dimensions (the GPU's work is negligible, so the wall time is
    the host's), with 2 and 10 layers. ``rounds`` rounds time the two models one after the other
    (the faster of two groups of ``forwards`` forwards each; the order alternates), so a change of
    the host's speed during the measurement falls on both; per layer = the difference / 8 per
    round. Returns the spreads (``timing.spread``: median, min, p90, ...) over the rounds of (per
    layer, the rest: the 2-layer time less twice the median per layer).

    One reading of the fastest of 7 groups, as before, differed 1.8x between two calibrations on
    one H200 host a few minutes apart (results/reference/heldout_h200.md, 2026-11-25 later);
    the median of rounds prices the host as it usually runs, and the spread says how much it
    moved.

    Raises:
        ValueError: ``rounds`` or ``forwards`` below 1.
    """
    import torch

    from zoo import ModelConfig, Transformer

    from .timing import spread

    if rounds < 1 or forwards < 1:
        raise ValueError(f"rounds and forwards must be >= 1, got {rounds}, {forwards}")

    def build(n_layers):
        cfg = ModelConfig.from_name("tiny", n_layers=n_layers, kernels=impl,
                                    **({"dtype": "bf16", "kv_dtype": "bf16"}
                                       if device == "cuda" else {}))
        m = Transformer.build(cfg, device)
        m.setup_cache(1, 64)
        T = 16 if stage == "prefill" else 1
        tok = torch.zeros(1, T, dtype=torch.long, device=device)
        pos, kv = (m.positions[:T], T) if T > 1 else (m.positions[10:11], 11)
        return lambda: m(tok, pos, kv_len=kv, last_only=T > 1)

    def host(fwd):
        ts = []
        for _ in range(2):
            t0 = time.perf_counter()
            for _ in range(forwards):
                fwd()
            ts.append((time.perf_counter() - t0) / forwards)
            if device == "cuda":
                torch.cuda.synchronize()
        return min(ts)  # a short pause of the host inside a group is not the host's cost

    small, big = build(2), build(10)
    per, small_t = [], []
    gc.collect()  # the calibration's own heap must not time its collections in here
    gc.disable()
    try:
        with torch.no_grad():
            for fwd in (small, big):  # warm-up
                for _ in range(5):
                    fwd()
            if device == "cuda":
                torch.cuda.synchronize()
            for i in range(rounds):  # ABBA: a steady drift of the host falls on both alike
                if i % 2 == 0:
                    a, b = host(small), host(big)
                else:
                    b, a = host(big), host(small)
                per.append(max((b - a) / 8, 0.0))
                small_t.append(a)
    finally:
        gc.enable()
    layer = statistics.median(per)  # the rest of each round against the usual per layer
    return spread(per), spread([max(a - 2 * layer, 0.0) for a in small_t])
