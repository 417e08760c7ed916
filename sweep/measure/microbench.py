"""The performance model's micro-benchmarks (run by ``sweep.measure.calibration_run``): GEMMs, the
decode GEMV, decode and prefill attention, the elementwise kernels, the launch costs, and the
timer they share. Each takes the shapes to measure and returns calibration rows (``entry``), s."""

from __future__ import annotations

import math
import time

from ..common.env import triton_interpret

COLD_L2_MULTIPLE = 2.5  # inputs rotated until they span this many L2 caches
# With ``duty`` (compute-bound GEMMs and prefill attention), a replay longer than this is followed
# by as long idle: big GEMMs back to back for tens of ms hold the GPU at its power limit and clock
# it down, unlike a model's GEMMs between memory-bound kernels (H100: in-model FFN GEMMs ~10%
# faster). Never for small kernels: after idle gaps 1.2-2.7x slower (the clocks drop while idle).
DUTY_AFTER_S = 5e-4
SPIN_UP_S = 0.01  # each benchmark's graph replayed this long before it is timed
NOISY, RETRIES = 1.25, 2  # a GPU timing of p90 > NOISY x min is taken again (``steadiest``)


def cold_copies(nbytes: float, cuda: bool, cap: int = 64) -> int:
    """How many copies of ``nbytes`` of input a benchmark rotates through so that each call reads
    its weights (or KV cache) from DRAM, as every layer of a model does: enough to span
    ``COLD_L2_MULTIPLE`` times the GPU's L2 (``L2_cache_size``), at most ``cap``; 1 on the CPU."""
    if not cuda:
        return 1
    import torch

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)
    return int(min(cap, max(1, math.ceil(COLD_L2_MULTIPLE * l2 / max(nbytes, 1.0)))))


def steadiest(measure, retries: int = RETRIES, noisy: float = NOISY) -> dict:
    """``measure()`` (a timing's ``spread``) taken again while its p90 exceeds ``noisy`` x its min,
    at most ``retries`` more times; the tightest try (least p90 / min) returned. A disturbed
    timing reads slow: 7 of the H100's 450 GEMV entries of 2026-11-28 read 1.3-3x their earlier
    figures at p90 / min 1.4-2.2 (``results/reference/decode_levers_h100.md``)."""
    tries = [measure()]
    while len(tries) <= retries and tries[-1]["p90"] > noisy * tries[-1]["min"]:
        tries.append(measure())
    return min(tries, key=lambda sp: sp["p90"] / sp["min"])


def timer(cuda: bool, reps: int):
    """``time(fn, n) -> spread (s)`` of one call: on a GPU a CUDA graph of ``n`` back-to-back
    calls replayed ``reps`` times (kernel time plus the graph's gap; ``steadiest`` of up to three),
    on the CPU plain repeats. ``fn`` may be a list of calls on copies of the inputs
    (``cold_copies``): the graph cycles through them, no call finding its inputs in L2."""
    import torch

    from .timing import spread

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
        return steadiest(lambda: _gpu_once(fn, n, duty))

    def _gpu_once(fn, n, duty):
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


KV_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 1, "fp8_e4m3": 1}


def decode_attention_grid(cuda: bool, quick: bool, kv_dtypes=None, full: bool = False
                          ) -> list[dict]:
    """Decode-attention shapes for the fit of each ``(impl, kv_dtype)`` (``kv_dtypes``: those
    wanted, default every one the device runs): ``full`` is the shipped calibration's grid (GQA
    groups 1 .. 32, batch 1 .. 64, context 512 and 4096, head_dim 64 and 128), else a reduced
    one (8 shapes: what a fit needs for a study's own shapes to correct)."""
    if quick:
        grid = [(1, 2, 4, 64, 16), (2, 2, 4, 128, 16), (2, 4, 2, 256, 32), (1, 1, 8, 128, 16)]
    elif full:
        grid = [(b, hkv, gq, s, d) for b in (1, 8, 64) for hkv, gq in ((1, 32), (2, 16), (8, 4),
                                                                       (8, 1), (32, 1))
                for s in (512, 4096) for d in (64, 128) if b * hkv * s <= 64 * 8 * 4096]
    else:
        grid = [(b, hkv, gq, s, 128) for b in (1, 8) for hkv, gq in ((8, 4), (2, 16))
                for s in (512, 4096)]
    out = []
    for impl in ["torch"] + (["triton"] if cuda else []):
        for kvd in (["bf16", "int8", "fp8_e4m3"] if cuda else ["fp32"]):
            if (impl == "torch" and kvd in ("int8", "fp8_e4m3")) or (
                    kv_dtypes is not None and (impl, kvd) not in kv_dtypes):
                continue
            out += [dict(impl=impl, kv_dtype=kvd, B=B, Hkv=Hkv, G=G, S=S, D=D, ring=0)
                    for B, Hkv, G, S, D in grid]
    return out


def decode_attention(device, tm, rnd, shapes, progress=None) -> list[dict]:
    """One new token against a KV cache, for each of ``shapes`` (``impl`` torch or triton,
    ``kv_dtype``, ``B``, ``Hkv``, ``G``, ``S`` (positions attended), ``D``, optionally ``cap``:
    the cache's capacity, default ``S + 64``, and ``ring``: 1 where the cache is a local layer's
    ring of ``S`` slots, ``cap == S``): the caches rotated through copies so each call
    reads from DRAM. The Triton kernel is launched as the model's decode step launches it
    (``zoo.attention``): with RoPE and the cache write folded in under
    ``switches.rope_in_attention``, and programmatic dependent launch where supported, so its
    autotuned choice is the one the model then finds (``kernels.tuning``)."""
    import torch

    from kernels import switches
    from kernels.gemv import pdl_supported
    from zoo.gqa import grouped_decode_attention

    cuda = device == "cuda"
    fold = switches.current().rope_in_attention
    pdl = pdl_supported(torch.device(device))
    rows = []
    for i, sh in enumerate(shapes):
        impl, kvd = sh["impl"], sh["kv_dtype"]
        B, Hkv, G, S, D = (int(sh[k]) for k in ("B", "Hkv", "G", "S", "D"))
        H = Hkv * G
        q = rnd(B, H, 1, D)
        cap = sh.get("cap")
        cache = int(cap) if cap is not None and cap == cap and int(cap) >= S else S + 64
        pos = torch.tensor([S - 1], device=device)
        new_kv = None
        if impl == "triton" and fold:  # the new token's k, v (before RoPE) and the tables
            kn, vn = rnd(B, Hkv, D), rnd(B, Hkv, D)
            cos = torch.rand(cache, D, device=device)
            new_kv = (kn, vn, cos, torch.rand(cache, D, device=device))
        scale_b = 4 if kvd in ("int8", "fp8_e4m3") else 0
        nbytes = 2.0 * B * Hkv * S * (D * KV_BYTES[kvd] + scale_b)
        fns = []
        for _ in range(cold_copies(nbytes, cuda, cap=32)):
            if impl == "torch":
                k, v = rnd(B, Hkv, S, D), rnd(B, Hkv, S, D)
                mask = torch.ones(1, S, dtype=torch.bool, device=device)
                fns.append(lambda q=q, k=k, v=v, mask=mask: grouped_decode_attention(q, k, v, mask))
                continue
            from kernels.decode_attention import decode_attention

            if kvd in ("bf16", "fp16", "fp32"):
                k, v, ks, vs = rnd(B, Hkv, cache, D), rnd(B, Hkv, cache, D), None, None
            else:
                t = torch.int8 if kvd == "int8" else torch.float8_e4m3fn
                k = rnd(B, Hkv, cache, D, dt=torch.float32).clamp(-100, 100).to(t)
                v = rnd(B, Hkv, cache, D, dt=torch.float32).clamp(-100, 100).to(t)
                ks = torch.rand(B, Hkv, cache, device=device) / 100
                vs = torch.rand(B, Hkv, cache, device=device) / 100
            fns.append(lambda q=q, k=k, v=v, ks=ks, vs=vs, pos=pos:
                       decode_attention(q, k, v, pos, ks, vs, pdl=pdl, new_kv=new_kv))
        sp = tm(fns)
        rows.append(entry("decode_attn", sp, impl=impl, kv_dtype=kvd, B=B, Hkv=Hkv, G=G, S=S, D=D,
                          ring=int(sh.get("ring") or 0), bytes=nbytes, scores=float(B * H * S)))
        del fns
        if progress:
            progress(i + 1, len(shapes))
    return rows


def prefill_attention_grid(cuda: bool, quick: bool) -> list[dict]:
    """The shipped calibration's prefill-attention shapes: sequence length x head_dim x GQA
    group, ``BH = 2^21 / T`` heads (2^14 on the CPU), torch and Triton layouts on a GPU."""
    out = []
    for impl in ("torch", "triton") if cuda else ("torch",):
        for T in ((16, 64, 256) if quick else (128, 512, 1024, 2048, 4096, 8192)):
            for D in ((16,) if quick else (64, 128)):
                for G in ((1, 4) if quick else (1, 4, 32)):
                    out.append(dict(impl=impl, T=T, D=D, G=G,
                                    BH=max(G, (2**21 if cuda else 2**14) // T), W=0, sink=0))
    return out


def prefill_attention(device, tm, rnd, shapes, progress=None) -> list[dict]:
    """Causal prefill attention as the model's prefill calls it, for each of ``shapes``
    (``impl``, ``T``, ``D``, ``G``, ``BH`` query heads over the batch, optionally ``W`` a local
    layer's window and ``sink`` 1 with attention sinks): torch path q a transposed view and k/v
    slices of the cache; Triton path all three views of the fused qkv output. A full layer's is
    causal SDPA; a local or sink layer's the band kernel (``kernels.prefill_attention``; torch
    path ``zoo.gqa.attention``'s blocks), its FLOPs the band's (``2 H D T W``). Compute-bound:
    timed at a duty cycle."""
    import torch
    import torch.nn.functional as F

    from kernels.prefill_attention import prefill_attention as band
    from zoo.gqa import attention as blocked

    rows = []
    for i, sh in enumerate(shapes):
        impl = sh["impl"]
        T, D, G = int(sh["T"]), int(sh["D"]), int(sh["G"])
        H = max(G, int(sh["BH"]) // G * G)
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
        W, sink = int(sh.get("W") or 0), int(sh.get("sink") or 0)
        sinks = rnd(H, dt=torch.float32) if sink else None
        if not (W or sink):
            fn = lambda q=q, k=k, v=v, g=G > 1: F.scaled_dot_product_attention(  # noqa: E731
                q, k, v, is_causal=True, enable_gqa=g)
        elif impl == "triton":
            fn = lambda q=q, k=k, v=v: band(q, k, v, W or None, sinks)  # noqa: E731
        else:
            fn = lambda q=q, k=k, v=v: blocked(q, k, v, causal=True, window=W or None,  # noqa: E731
                                               sinks=sinks)
        sp = tm(fn, n=2 if T >= 4096 else 8, duty=True)
        rows.append(entry("prefill_attn", sp, impl=impl, T=T, D=D, G=G, BH=H, W=W, sink=sink,
                          flops=2.0 * H * D * T * (W or T)))
        del q, k, v
        if progress:
            progress(i + 1, len(shapes))
    return rows


def gemms(shapes, cuda: bool, tm, rnd, dtype: str, progress=None) -> list[dict]:
    """``gemm`` entries: ``F.linear`` of ``[M, K] x [K, N]`` for every ``(M, N, K)`` of
    ``shapes`` (inputs bounded in size), weights rotated cold; the memory-bound M (< 1024) first,
    then the compute-bound ones at a duty cycle (``timer``)."""
    import torch.nn.functional as F

    rows = []
    by_nk: dict = {}
    for M, N, K in shapes:
        if M * max(N, K) * 2 <= (2**31 if cuda else 2**26):  # bounded input size
            by_nk.setdefault((N, K), set()).add(M)
    total, done = sum(map(len, by_nk.values())), 0
    for big in (False, True):
        for (N, K), all_m in sorted(by_nk.items()):
            ms = sorted(M for M in all_m if (M >= 1024) == big)
            if not ms:
                continue
            # weights read from DRAM on every call, as each layer's are in a model
            ws = [rnd(N, K) for _ in range(cold_copies(N * K * (2 if cuda else 4), cuda))]
            for M in ms:
                x = rnd(M, K)
                sp = tm([lambda x=x, w=w: F.linear(x, w) for w in ws],
                        n=2 if M * N * K > 2**36 else 8, duty=big)
                rows.append(entry("gemm", sp, M=M, N=N, K=K, dtype=dtype, flops=2.0 * M * N * K))
                done += 1
                if progress:
                    progress(done, total)
            del ws
    return rows


def gemvs(shapes, cuda: bool, tm, rnd, dtype: str, progress=None) -> list[dict]:
    """``gemv`` entries: a decode step's linear layer as the model runs it with Triton kernels
    (``kernels.decode_linear.linear``: the Triton GEMV with its prologue, or cuBLAS after the
    prologue's own kernel, whichever this device chose), for each ``(M, N, K, prologue)``
    (``none``, ``norm``, ``norm+res``, ``swiglu``, each maybe ``+bias``); weights rotated cold."""
    import types

    import torch

    from kernels import decode_linear

    rows = []
    for i, (M, N, K, pro) in enumerate(shapes):
        base, res, bias = pro.split("+")[0], "+res" in pro, "+bias" in pro
        x = rnd(M, 2 * K if base == "swiglu" else K)
        r = rnd(M, K) if res else None
        norm = types.SimpleNamespace(weight=rnd(K), eps=1e-5) if base == "norm" else None
        layers = [types.SimpleNamespace(weight=rnd(N, K), bias=rnd(N) if bias else None)
                  for _ in range(cold_copies(N * K * (2 if cuda else 4), cuda))]
        fns = [lambda lay=lay: decode_linear.linear(x, lay, base, norm, r) for lay in layers]
        with torch.no_grad():
            fns[0]()  # chooses the GEMV or cuBLAS for this shape (outside any capture)
            if base == "norm" and res:  # the first layer's qkv runs it without a residual
                decode_linear.linear(x, layers[0], base, norm, None)
            sp = tm(fns)
        wb = 2 if cuda else 4
        rows.append(entry("gemv", sp, M=M, N=N, K=K, prologue=pro, dtype=dtype,
                          bytes=float((N * K + M * (N + K)) * wb), flops=2.0 * M * N * K))
        del layers, fns
        if progress:
            progress(i + 1, len(shapes))
    return rows


def elementwise(device, tm, rnd, quick) -> list[dict]:
    """The norms, RoPE, SwiGLU, KV write and quantize kernels (torch and Triton) by bytes, the
    MoE layer's slots' sum, fused routing, and a longer step's routing and counting sort
    (``moe_sum``, ``route_align``, ``route_rows``, ``moe_align``), and
    the greedy sampling of a stage's logits (``sample``: their clone and argmax, as a trial's
    prefill runs them; bytes: read, written, read again; ``argmax``: a decode step's, inside its
    graph, ``kernels.argmax`` on the Triton path)."""
    import torch

    from kernels import argmax, kv_quant, moe_align, moe_gemm, rmsnorm, rope, swiglu
    from zoo.moe import align_block, align_bytes, route_bytes, sum_bytes

    cuda = device == "cuda"
    tri = cuda or (triton_interpret() and not quick)  # Triton's entries: GPU, or interpreter
    wb, rows = (2 if cuda else 4), []
    Ms = (1, 16, 256) if quick else (1, 8, 64, 512, 4096, 32768)
    d, H, Hkv, D, F_ = (128, 8, 2, 16, 352) if quick else (4096, 32, 8, 128, 14336)
    for M in Ms:
        x, r, wt, h = rnd(M, d), rnd(M, d), rnd(d), rnd(M, 2 * F_)
        table = rnd(4096 if not quick else 512, d)
        ids = torch.randint(0, table.shape[0], (M,), device=device)
        ops = {("rmsnorm", "torch"): (lambda: rmsnorm.reference(x, wt, 1e-5), 2 * M * d * wb),
               ("residual", "torch"): (lambda: x + r, 3 * M * d * wb),
               ("swiglu", "torch"): (lambda: swiglu.reference(h), 3 * M * F_ * wb),
               ("embedding", "torch"): (lambda: torch.nn.functional.embedding(ids, table),
                                        2 * M * d * wb)}
        q, k = rnd(1, M, H, D), rnd(1, M, Hkv, D)
        cos, sin = rnd(M + 8, D, dt=torch.float32), rnd(M + 8, D, dt=torch.float32)
        pos = torch.arange(M, device=device)
        ops[("rope", "torch")] = (lambda: rope.reference(q, k, cos, sin, pos),
                                  2 * M * (H + Hkv) * D * wb)
        kc = torch.zeros(1, Hkv, M + 8, D, device=device, dtype=x.dtype)
        kn = rnd(1, Hkv, M, D)
        ops[("kv_write", "torch")] = (lambda: (kc.index_copy_(2, pos, kn), kc.index_copy_(2, pos, kn)),
                                      2 * M * Hkv * D * 2 * wb)
        if tri:  # (the calibration's fingerprints carry the interpreter: common.env)
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
        # the MoE layer's small kernels (zoo.moe; k = 8 of 64 experts, bytes as the kernel list's):
        # the slots' sum; the fused routing (a decode step's few slots), else rows' and the sort
        if M <= 4096:
            y = rnd(M * 8, d)
            ops[("moe_sum", "torch")] = (lambda: y.view(M, 8, d).sum(1), sum_bytes(M, 8, d, wb))
        if tri and moe_gemm.fused_route(M * 8, 64):
            lg = rnd(M, 64, dt=torch.float32)
            ops[("route_align", "triton")] = (lambda: moe_gemm.route_align(
                lg, 8, False, 16, x.dtype), route_bytes(M, 64, 8, d, wb))
        elif tri:
            lg, sel = rnd(M, 64, dt=torch.float32), torch.randint(0, 64, (M, 8), device=device)
            ops[("route_rows", "triton")] = (lambda: moe_align.route_rows(
                lg, 8, False, x.dtype), route_bytes(M, 64, 8, d, wb))
            ops[("moe_align", "triton")] = (lambda: moe_align.align(
                sel, 64, align_block(M * 8, 64)), align_bytes(M * 8, 64))
        if M <= 512:  # a stage's last-position logits [batch, vocab], sampled greedily:
            V = 512 if quick else 128256  # a prefill's cloned out of its graph, a decode step's
            logits = rnd(M, V)            # argmax inside it (zoo.generate.decode_greedy)
            ops[("sample", "torch")] = (lambda: logits.clone().argmax(-1, keepdim=True),
                                        3 * M * V * wb)
            ops[("argmax", "torch")] = (lambda: logits.argmax(-1, keepdim=True), M * V * wb)
            if tri:
                ops[("argmax", "triton")] = (lambda: argmax.argmax(logits), M * V * wb)
        for (op, impl), (fn, nbytes) in ops.items():
            rows.append(entry("elementwise", tm(fn), op=op, impl=impl, bytes=float(nbytes), M=M))
    return rows
