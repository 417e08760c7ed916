"""Kernel-level groups of ``sweep.measure.benchmark``: the decode GEMV per shape against cuBLAS, each Triton
kernel against its DRAM roofline and the torch op it replaces, and the NVTX ranges' cost.

Called by ``sweep.measure.benchmark`` (``--group gemv | kernels | nvtx``); rows go into its record.
"""

from __future__ import annotations

import gc
import itertools
import math
import time

import torch

from zoo import Generator, ModelConfig, Transformer

from .timing import Timer, spread


def _free():
    gc.collect()
    torch.cuda.empty_cache()


def gemv_rows(copy_bw: float) -> list[dict]:
    """Each decode linear layer of the 1B and 8B shapes at M = 1 and 8, on ``kernels.gemv`` (with
    its fused prologue) and on cuBLAS (``kernels.decode_linear.cublas_linear``): time per call in
    a CUDA graph of 20 calls (``kernels.graph_timing.time_ms``, median of 5 replays) cycling
    over copies of the weight that together exceed 2.5x the L2 (each call reads its weight from
    DRAM, as in the decode step), and the fraction of the copy roofline for the weight bytes;
    ``choice`` is the faster one, ``triton_config`` the tile the autotuner kept."""
    from kernels import decode_linear as dl
    from kernels import gemv as gv
    from kernels.graph_timing import time_ms

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for model in ("llama3_2_1b", "llama3_1_8b"):
        c = ModelConfig.from_name(model)
        d, f = c.d_model, c.ffn_dim
        layers = [("qkv", c.q_dim + 2 * c.kv_dim, d, "norm"), ("out_proj", d, c.q_dim, "none"),
                  ("w13", 2 * f, d, "norm"), ("w2", d, f, "swiglu"), ("lm_head", c.vocab_size, d, "norm")]
        for m in (1, 8):
            for name, n, k, pro in layers:
                nbytes = n * k * 2
                ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5
                      for _ in range(min(20, max(1, math.ceil(2.5 * l2 / nbytes))))]
                x = torch.randn(m, 2 * k if pro == "swiglu" else k, device="cuda", dtype=torch.bfloat16)
                r = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                nw = torch.ones(k, device="cuda", dtype=torch.bfloat16)
                nxt = itertools.cycle(ws)

                def tri():
                    return gv.gemv(x, next(nxt), None, pro, nw, 1e-5, r if pro == "norm" else None)

                def cub():
                    return dl.cublas_linear(x, next(nxt), None, pro, nw, 1e-5,
                                            r if pro == "norm" else None)

                t_tr = time_ms(tri, cold=False)  # cold already: the copies
                cfg = getattr(gv._tuned, "best_config", None)
                t_cb = time_ms(cub, cold=False)
                rows.append({"model": model, "layer": name, "M": m, "N": n, "K": k, "prologue": pro,
                             "weight_bytes": nbytes, "weight_copies": len(ws),
                             "triton_ms": t_tr, "cublas_ms": t_cb,
                             "triton_frac_roofline": nbytes / (t_tr / 1e3) / copy_bw,
                             "cublas_frac_roofline": nbytes / (t_cb / 1e3) / copy_bw,
                             "choice": "triton" if t_tr <= t_cb else "cublas",
                             "triton_config": str(cfg) if cfg is not None else ""})
    _free()
    return rows


def kernel_rows(copy_bw: float) -> list[dict]:
    """Per-kernel time, achieved GB/s against its minimum bytes, and the torch op it replaces."""
    from triton.testing import do_bench

    from kernels import decode_attention as da
    from kernels import kv_quant, rmsnorm, rope, swiglu
    from zoo.rope_tables import rope_cache

    def t(fn):
        return do_bench(fn, warmup=25, rep=100, return_mode="median") / 1e3

    bf = torch.bfloat16
    rows = []

    def row(name, shape, nbytes, fn, ref, ref_name):
        tk, tr = t(fn), t(ref)
        rows.append({"kernel": name, "shape": shape, "min_bytes": nbytes, "time_ms": 1e3 * tk,
                     "gb_s": nbytes / tk / 1e9, "roofline_frac": nbytes / tk / copy_bw,
                     "torch_op": ref_name, "torch_time_ms": 1e3 * tr, "speedup": tr / tk})

    M, d = 16384, 4096
    x, r = torch.randn(M, d, device="cuda", dtype=bf), torch.randn(M, d, device="cuda", dtype=bf)
    w = torch.randn(d, device="cuda", dtype=bf)
    row("rmsnorm_residual", f"[{M}, {d}] bf16", 4 * M * d * 2,
        lambda: rmsnorm.rmsnorm(x, w, 1e-5, residual=r),
        lambda: rmsnorm.reference(x, w, 1e-5, residual=r), "add + RMSNorm (eager, 6 kernels)")
    F = 14336
    h = torch.randn(4096, 2 * F, device="cuda", dtype=bf)
    row("swiglu", f"[4096, 2x{F}] bf16", 3 * 4096 * F * 2, lambda: swiglu.swiglu(h),
        lambda: swiglu.reference(h), "chunk + silu + mul (eager)")
    cfg = ModelConfig.from_name("llama3_1_8b")
    cos, sin = rope_cache(cfg, 8192, "cuda")
    B, T, H, Hkv, D = 4, 4096, 32, 8, 128
    qkv = torch.randn(B, T, (H + 2 * Hkv) * D, device="cuda", dtype=bf)
    q, k, _ = qkv.split([H * D, Hkv * D, Hkv * D], -1)
    q, k = q.view(B, T, H, D), k.view(B, T, Hkv, D)
    pos = torch.arange(T, device="cuda")
    row("rope_qk_inplace", f"q [{B},{T},{H},{D}], k [{B},{T},{Hkv},{D}] bf16",
        2 * B * T * (H + Hkv) * D * 2, lambda: rope.rope_(q, k, cos, sin, pos),
        lambda: rope.reference(q, k, cos, sin, pos), "index tables + rotate-half (eager)")
    # decode attention at the KV-dominated shape (one layer of Llama-3.2-1B, batch 64, 8k)
    B, H, Hkv, D, S = 64, 32, 8, 64, 8224
    L = 8192 + 16
    qd = torch.randn(B, H, D, device="cuda", dtype=bf)
    kc = torch.randn(B, Hkv, S, D, device="cuda", dtype=bf)
    vc = torch.randn(B, Hkv, S, D, device="cuda", dtype=bf)
    p = torch.tensor([L - 1], device="cuda")
    kv_bytes = 2 * B * Hkv * L * D * 2
    row("decode_attention_bf16", f"B={B} H={H} Hkv={Hkv} D={D} kv_len={L}", kv_bytes,
        lambda: da.decode_attention(qd, kc, vc, p),
        lambda: torch.nn.functional.scaled_dot_product_attention(
            qd[:, :, None], kc[:, :, :L], vc[:, :, :L], enable_gqa=True),
        "scaled_dot_product_attention (enable_gqa, exact length)")
    for kvd in ("int8", "fp8_e4m3"):
        (kq, ks), (vq, vs) = kv_quant.reference(kc, kvd), kv_quant.reference(vc, kvd)
        row(f"decode_attention_{kvd}", f"B={B} H={H} Hkv={Hkv} D={D} kv_len={L}",
            2 * B * Hkv * L * (D + 4), lambda: da.decode_attention(qd, kq, vq, p, ks, vs),
            lambda: da.reference(qd, kq, vq, L, ks, vs), "dequantize + SDPA (eager)")
    _free()
    xk = torch.randn(8, 4096, 8, 128, device="cuda", dtype=bf).transpose(1, 2)
    out = torch.empty(8, 8, 4096, 128, device="cuda", dtype=torch.int8)
    sc = torch.empty(8, 8, 4096, device="cuda")
    pos = torch.arange(4096, device="cuda")
    n = 8 * 8 * 4096 * 128
    row("kv_quant_int8", "[8, 8, 4096, 128] bf16 -> int8", n * 2 + n + 8 * 8 * 4096 * 4,
        lambda: kv_quant.quantize_kv(xk, out, sc, pos, "int8"),
        lambda: kv_quant.reference(xk, "int8"), "amax + divide + round + cast (eager)")
    _free()
    return rows


def nvtx_overhead(rounds: int = 8, steps: int = 128) -> list[dict]:
    """Decode step time (ms) with NVTX ranges off and on (``zoo.nvtx``, no profiler attached), for
    the 1B shape at batch 1 in eager and cudagraph modes.

    Ranges are switched on and off every other step inside each run of ``steps`` steps, so both
    halves see the same host and clock drift; the figures are medians over all steps of a kind,
    with min and p90. Also counts the ranges one step pushes and times one push/pop pair on the
    host (us), which with the step time gives the expected cost. Returns one row per mode.
    """
    from zoo import nvtx

    rows = []
    for mode in ("eager", "cudagraph"):
        cfg = ModelConfig.from_name("llama3_2_1b")
        model = Transformer.build(cfg, "cuda")
        gen = Generator(model, 1, 512 + steps + 1, mode)
        prompt = torch.randint(0, cfg.vocab_size, (1, 512), device="cuda")
        timer = Timer("cuda")
        first = gen.prefill(prompt).argmax(-1, keepdim=True)
        state = {}

        def step(on):
            nvtx.enable(on)
            state["tok"] = gen.decode(state["tok"]).argmax(-1, keepdim=True)

        res = {False: [], True: []}
        for r in range(rounds + 1):
            gen.pos, state["tok"] = 512, first
            ts = timer.steps([lambda i=i: step(bool(i % 2)) for i in range(steps)])
            if r:  # the first run warms up (graph capture)
                for i, t in enumerate(ts):
                    res[bool(i % 2)].append(t)
        nvtx.enable(True)
        pushed = []
        real_push = nvtx._push
        nvtx._push = lambda name: (pushed.append(name), real_push(name))
        gen.pos, state["tok"] = 512, first
        gen.decode(state["tok"])
        nvtx._push = real_push
        t0 = time.perf_counter()
        for _ in range(20000):
            with nvtx.annotate("x"):
                pass
        pair_us = (time.perf_counter() - t0) / 20000 * 1e6
        nvtx.enable(False)
        sp = {k: spread(v) for k, v in res.items()}
        off, on_ = sp[False]["median"], sp[True]["median"]
        rows.append({"case": f"nvtx-llama3_2_1b-b1-{mode}", "mode": mode, "rounds": rounds,
                     "steps_each": len(res[False]), "step_ms_off": 1e3 * off,
                     "step_ms_on": 1e3 * on_, "overhead_pct": 100 * (on_ / off - 1),
                     "step_ms_off_min_p90": [1e3 * sp[False]["min"], 1e3 * sp[False]["p90"]],
                     "step_ms_on_min_p90": [1e3 * sp[True]["min"], 1e3 * sp[True]["p90"]],
                     "ranges_per_step": len(pushed), "push_pop_us": pair_us,
                     "expected_overhead_pct": 100 * len(pushed) * pair_us * 1e-3 / (1e3 * off)})
    _free()
    return rows
