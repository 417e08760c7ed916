"""The calibration's micro-benchmarks (``sweep.analysis.calibrate``): decode and prefill
attention, the elementwise kernels, the launch costs, and the timer they share. Times in s."""

from __future__ import annotations

import gc
import math
import os
import time

COLD_L2_MULTIPLE = 2.5  # inputs rotated until they span this many L2 caches
# With ``duty`` (compute-bound GEMMs and prefill attention), a replay longer than this is followed
# by as long idle: big GEMMs back to back for tens of ms hold the GPU at its power limit and clock
# it down, which a model's GEMMs, between memory-bound kernels, do not see (H100: in-model FFN
# GEMMs ran ~10% faster than back to back). Never for small kernels: after idle gaps they ran
# 1.2-2.7x slower than in a model (the clocks drop while idle).
DUTY_AFTER_S = 5e-4
SPIN_UP_S = 0.01  # each benchmark's graph replayed this long before it is timed


def cold_copies(nbytes: float, cuda: bool, cap: int = 64) -> int:
    """How many copies of ``nbytes`` of input a benchmark rotates through so that each call reads
    its weights (or KV cache) from DRAM, as every layer of a model does: enough to span
    ``COLD_L2_MULTIPLE`` times the GPU's L2 (``L2_cache_size``), at most ``cap``; 1 on the CPU."""
    if not cuda:
        return 1
    import torch

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)
    return int(min(cap, max(1, math.ceil(COLD_L2_MULTIPLE * l2 / max(nbytes, 1.0)))))


def timer(cuda: bool, reps: int):
    """``time(fn, n) -> spread (s)`` of one call: on a GPU a CUDA graph of ``n`` back-to-back
    calls replayed ``reps`` times (kernel time plus the graph's gap), on the CPU plain repeats.
    ``fn`` may be a list of calls on different copies of the inputs (``cold_copies``): the graph
    cycles through them, so no call finds its inputs in L2 left there by the previous one."""
    import torch

    from ..measure.timing import spread

    def cpu(fn, n=1, duty=False):
        fn = fn[0] if isinstance(fn, list) else fn
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return spread(ts)

    def gpu(fn, n=8, duty=False):
        fns = fn if isinstance(fn, list) else [fn]
        n = max(n, len(fns))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for f in fns:
                f()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(n):
                fns[i % len(fns)]()
        t_end = time.perf_counter() + SPIN_UP_S  # clocks up before timing
        while time.perf_counter() < t_end:
            g.replay()
            torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            el = a.elapsed_time(b) / 1e3
            ts.append(el / n)
            if duty and el > DUTY_AFTER_S:  # idle as long as it worked: no power-limit clocks
                time.sleep(el)
        del g
        return spread(ts)

    return gpu if cuda else cpu


def entry(kind, sp, **shape) -> dict:
    """One calibration row: ``kind``, its shape columns, and the time spread (s)."""
    return {"kind": kind, **shape, "time_s": sp["median"], "time_s_min": sp["min"],
            "time_s_p90": sp["p90"]}


def decode_attention(device, tm, rnd, quick, dtype) -> list[dict]:
    """One new token against a KV cache, torch and Triton (bf16, int8, fp8 caches on a GPU), the
    caches rotated through copies so each call reads from DRAM."""
    import torch

    from zoo.gqa import grouped_decode_attention

    cuda = device == "cuda"
    rows = []
    impls = ["torch"] + (["triton"] if cuda else [])
    kvs = ["bf16", "int8", "fp8_e4m3"] if cuda else [dtype]
    # (B, Hkv, G, S, D): GQA groups 1 .. 32 (the torch path's cost grows with the query heads'
    # fp32 scores, B * H * S, beside the KV bytes)
    grid = ([(1, 2, 4, 64, 16), (2, 2, 4, 128, 16), (2, 4, 2, 256, 32), (1, 1, 8, 128, 16)]
            if quick else
            [(b, hkv, gq, s, d) for b in (1, 8, 64) for hkv, gq in ((1, 32), (2, 16), (8, 4),
                                                                    (8, 1), (32, 1))
             for s in (512, 4096) for d in (64, 128) if b * hkv * s <= 64 * 8 * 4096])
    kvbytes = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 1, "fp8_e4m3": 1}
    for impl in impls:
        for kvd in kvs:
            if impl == "torch" and kvd in ("int8", "fp8_e4m3"):
                continue
            for B, Hkv, G, S, D in grid:
                H = Hkv * G
                q = rnd(B, H, 1, D)
                cache = S + 64
                pos = torch.tensor([S - 1], device=device)
                scale_b = 4 if kvd in ("int8", "fp8_e4m3") else 0
                nbytes = 2.0 * B * Hkv * S * (D * kvbytes[kvd] + scale_b)
                fns = []
                for _ in range(cold_copies(nbytes, cuda, cap=32)):
                    if impl == "torch":
                        k, v = rnd(B, Hkv, S, D), rnd(B, Hkv, S, D)
                        mask = torch.ones(1, S, dtype=torch.bool, device=device)
                        fns.append(lambda q=q, k=k, v=v, mask=mask:
                                   grouped_decode_attention(q, k, v, mask))
                        continue
                    from kernels.decode_attention import decode_attention

                    if kvd == "bf16":
                        k, v, ks, vs = rnd(B, Hkv, cache, D), rnd(B, Hkv, cache, D), None, None
                    else:
                        t = torch.int8 if kvd == "int8" else torch.float8_e4m3fn
                        k = rnd(B, Hkv, cache, D, dt=torch.float32).clamp(-100, 100).to(t)
                        v = rnd(B, Hkv, cache, D, dt=torch.float32).clamp(-100, 100).to(t)
                        ks = torch.rand(B, Hkv, cache, device=device) / 100
                        vs = torch.rand(B, Hkv, cache, device=device) / 100
                    fns.append(lambda q=q, k=k, v=v, ks=ks, vs=vs, pos=pos:
                               decode_attention(q, k, v, pos, ks, vs))
                sp = tm(fns)
                rows.append(entry("decode_attn", sp, impl=impl, kv_dtype=kvd, B=B, Hkv=Hkv, G=G,
                                 S=S, D=D, bytes=nbytes, scores=float(B * H * S)))
                del fns
    return rows


def prefill_attention(device, tm, rnd, quick) -> list[dict]:
    """Causal SDPA as the model's prefill calls it (compute-bound: timed at a duty cycle)."""
    import torch.nn.functional as F

    cuda = device == "cuda"
    rows = []
    # prefill attention as the model calls it: causal SDPA over q, k, v in the model's layouts
    # (torch path: q a transposed view, k/v slices of the cache; Triton path: all three views of
    # the fused qkv output), GQA groups 1 .. 32
    for impl in ("torch", "triton") if cuda else ("torch",):
        for T in ((16, 64, 256) if quick else (128, 512, 1024, 2048, 4096, 8192)):
            for D in ((16,) if quick else (64, 128)):
                for G in ((1, 4) if quick else (1, 4, 32)):
                    H = max(G, (2**21 if cuda else 2**14) // T)
                    Hkv = H // G
                    if impl == "torch":
                        q = rnd(1, T, H, D).transpose(1, 2)
                        k = rnd(1, Hkv, T + 64, D)[:, :, :T]
                        v = rnd(1, Hkv, T + 64, D)[:, :, :T]
                    else:
                        qkv = rnd(1, T, (H + 2 * Hkv) * D)
                        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
                        q = q.view(1, T, H, D).transpose(1, 2)
                        k = k.view(1, T, Hkv, D).transpose(1, 2)
                        v = v.view(1, T, Hkv, D).transpose(1, 2)
                    sp = tm(lambda q=q, k=k, v=v, g=G > 1: F.scaled_dot_product_attention(
                        q, k, v, is_causal=True, enable_gqa=g), n=2 if T >= 4096 else 8,
                        duty=True)
                    rows.append(entry("prefill_attn", sp, impl=impl, T=T, D=D, G=G, BH=H,
                                      flops=2.0 * H * D * T * T))
    return rows


def elementwise(device, tm, rnd, quick) -> list[dict]:
    """The norms, RoPE, SwiGLU, KV write and quantize kernels (torch and Triton) by bytes."""
    import torch

    from kernels import kv_quant, rmsnorm, rope, swiglu

    cuda = device == "cuda"
    wb = 2 if cuda else 4
    rows = []
    Ms = (1, 16, 256) if quick else (1, 8, 64, 512, 4096, 32768)
    d, H, Hkv, D, F_ = (128, 8, 2, 16, 352) if quick else (4096, 32, 8, 128, 14336)
    for M in Ms:
        x, r, wt = rnd(M, d), rnd(M, d), rnd(d)
        ops = {("rmsnorm", "torch"): (lambda: rmsnorm.reference(x, wt, 1e-5), 2 * M * d * wb),
               ("residual", "torch"): (lambda: x + r, 3 * M * d * wb),
               ("swiglu", "torch"): (None, 3 * M * F_ * wb),
               ("embedding", "torch"): (None, 2 * M * d * wb)}
        h = rnd(M, 2 * F_)
        ops[("swiglu", "torch")] = (lambda: swiglu.reference(h), 3 * M * F_ * wb)
        table = rnd(4096 if not quick else 512, d)
        ids = torch.randint(0, table.shape[0], (M,), device=device)
        ops[("embedding", "torch")] = (lambda: torch.nn.functional.embedding(ids, table),
                                       2 * M * d * wb)
        q, k = rnd(1, M, H, D), rnd(1, M, Hkv, D)
        cos, sin = rnd(M + 8, D, dt=torch.float32), rnd(M + 8, D, dt=torch.float32)
        pos = torch.arange(M, device=device)
        ops[("rope", "torch")] = (lambda: rope.reference(q, k, cos, sin, pos),
                                  2 * M * (H + Hkv) * D * wb)
        kc = torch.zeros(1, Hkv, M + 8, D, device=device, dtype=x.dtype)
        kn = rnd(1, Hkv, M, D)
        ops[("kv_write", "torch")] = (lambda: (kc.index_copy_(2, pos, kn), kc.index_copy_(2, pos, kn)),
                                      2 * M * Hkv * D * 2 * wb)
        if cuda or os.environ.get("TRITON_INTERPRET") == "1" and not quick:
            ops[("rmsnorm", "triton")] = (lambda: rmsnorm.rmsnorm(x, wt, 1e-5, residual=r),
                                          4 * M * d * wb)
            ops[("swiglu", "triton")] = (lambda: swiglu.swiglu(h), 3 * M * F_ * wb)
            ops[("rope", "triton")] = (lambda: rope.rope_(q, k, cos, sin, pos),
                                       2 * M * (H + Hkv) * D * wb)
            ops[("kv_write", "triton")] = ops[("kv_write", "torch")]
            if cuda:
                out = torch.zeros(1, Hkv, M + 8, D, device=device, dtype=torch.int8)
                sc = torch.ones(1, Hkv, M + 8, device=device)
                ops[("kv_quant", "triton")] = (
                    lambda: (kv_quant.quantize_kv(kn, out, sc, pos, "int8"),
                             kv_quant.quantize_kv(kn, out, sc, pos, "int8")),
                    2 * M * Hkv * (D * (wb + 1) + 4))
        for (op, impl), (fn, nbytes) in ops.items():
            rows.append(entry("elementwise", tm(fn), op=op, impl=impl, bytes=float(nbytes), M=M))
    return rows


def launch(device, tm) -> list[dict]:
    """Fixed costs: one tiny kernel in a CUDA graph, one tiny op issued eagerly by the host,
    one graph launch (s each)."""
    import torch

    from ..measure.timing import spread

    x = torch.zeros(16, device=device)
    rows = []
    n = 200

    def eager():
        for _ in range(n):
            x.add_(1)

    eager()  # the first ops load the kernels
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        eager()
    if device == "cuda":
        torch.cuda.synchronize()
    host = (time.perf_counter() - t0) / 5 / n
    rows.append(entry("launch", spread([host]), op="eager_op"))
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
    for impl in ("torch", "triton") if device == "cuda" else ("torch",):
        for stage, suffix in (("decode", ""), ("prefill", "_prefill")):
            per_layer, fixed = _eager_host(device, impl, stage)
            rows.append(entry("launch", spread([per_layer]), op=f"eager_layer_{impl}{suffix}"))
            rows.append(entry("launch", spread([fixed]), op=f"eager_fixed_{impl}{suffix}"))
    return rows


def graph_gap(device) -> list[dict]:
    """The ``graph_gap`` launch entry (``_graph_gap``), empty on the CPU. Measure it last: once
    torch.profiler (CUPTI) has run in a process, its small kernels time 1.2-2.7x slower (H100)."""
    import torch

    if device != "cuda":
        return []
    gap = _graph_gap(torch.zeros(16, device=device))
    return [] if gap is None else [entry("launch", {"median": gap, "min": gap, "p90": gap},
                                         op="graph_gap")]


def _graph_gap(x, n: int = 200) -> float | None:
    """Idle time (s) between two dependent kernels replayed in a CUDA graph: a graph of ``n`` tiny
    kernels under torch.profiler, ``(span - sum of kernel durations) / (n - 1)``; None where the
    profiler records no kernels. Every calibrated time includes one such gap per kernel; the
    predictor books them as launch overhead."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            x.add_(1)
    g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        g.replay()
        torch.cuda.synchronize()
    ks = sorted((e.time_range.start, e.time_range.end) for e in p.events()
                if e.device_type.name == "CUDA")
    if len(ks) < n // 2:
        return None
    busy = sum(e - s for s, e in ks)
    return max(ks[-1][1] - ks[0][0] - busy, 0.0) / (len(ks) - 1) / 1e6


def _eager_host(device: str, impl: str, stage: str = "decode") -> tuple[float, float]:
    """Host time (s) to issue one layer, and the rest of a forward (embedding, final norm, LM
    head), of the zoo's model run eagerly: forwards of a one-token decode step (``stage``
    ``decode``) or a 16-token prefill from position 0 (``prefill``: its own ops, SDPA and the
    cache write) on a model of tiny dimensions (the GPU's work is negligible, so the wall time is
    the host's), with 2 and 10 layers; per layer = the difference / 8 (fastest of 7 runs of 20
    forwards each)."""
    import torch

    from zoo import ModelConfig, Transformer

    def host(n_layers):
        cfg = ModelConfig.from_name("tiny", n_layers=n_layers, kernels=impl,
                                    **({"dtype": "bf16", "kv_dtype": "bf16"}
                                       if device == "cuda" else {}))
        m = Transformer.build(cfg, device)
        m.setup_cache(1, 64)
        T = 16 if stage == "prefill" else 1
        tok = torch.zeros(1, T, dtype=torch.long, device=device)
        pos, kv = (m.positions[:T], T) if T > 1 else (m.positions[10:11], 11)
        gc.collect()  # the calibration's own heap must not time its collections in here
        gc.disable()
        with torch.no_grad():
            for _ in range(10):
                m(tok, pos, kv_len=kv, last_only=T > 1)
            if device == "cuda":
                torch.cuda.synchronize()
            ts = []
            for _ in range(7):
                t0 = time.perf_counter()
                for _ in range(20):
                    m(tok, pos, kv_len=kv, last_only=T > 1)
                ts.append((time.perf_counter() - t0) / 20)
                if device == "cuda":
                    torch.cuda.synchronize()
        gc.enable()
        return min(ts)  # the host's own cost; slower repeats are other work on the machine

    a, b = host(2), host(10)
    per_layer = max((b - a) / 8, 0.0)
    return per_layer, max(a - 2 * per_layer, 0.0)


