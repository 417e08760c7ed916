"""Calibration: micro-benchmarks of the kernels the zoo launches, never of whole models.

``python -m sweep.calibrate [--refresh] [--quick]`` measures, on this device, in a child process:

- ``gemm``: ``F.linear`` (what ``nn.Linear`` runs) of ``[M, K] x [K, N]`` in the model dtype over
  ``M`` in powers of two (1 .. 32768 on a GPU) and every ``(N, K)`` the shipped models and
  experiment spaces use (q/k/v, output, FFN gate+up and down, LM head), plus off-grid dims (odd
  multiples, non-multiples of 64) so the performance model can interpolate in log space;
- ``decode_attn``: one new token against a KV cache, torch (``zoo.model.grouped_decode_attention``)
  and Triton (``kernels.decode_attention``; bf16, int8, fp8 caches on a GPU), over batch, KV
  heads, group size, context and head_dim;
- ``prefill_attn``: causal ``scaled_dot_product_attention`` over sequence length and head_dim;
- ``elementwise``: RMSNorm (+ residual), RoPE, SwiGLU, the KV write and quantize-on-write, torch
  and Triton, by bytes moved;
- ``launch``: the fixed cost per kernel inside a CUDA graph and per op in eager mode.

On a GPU the kernels are timed as CUDA-graph replays of back-to-back launches (kernel time plus
the graph's gap, as a decode step runs them), median of repeats with min and p90 kept; on the CPU
eagerly. Results: ``results/calibration/<device>.parquet`` (one row per entry: ``kind``, its
shape columns, ``time_s``, ``time_s_min``, ``time_s_p90``) and ``<device>.json`` (device, driver,
versions, date, grid, wall time), cached like the ceilings and measured on first use. On the CPU a
reduced grid over the tiny shapes (``--quick``, what CI runs).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from ..atomic import write_atomic, write_json
from ..env import REPO, environment, slug

CAL_DIR = REPO / "results" / "calibration"
VERSION = 2  # of the grid and the table's columns: a cache of another version is measured again
OFF_GRID = [(1000, 1000), (1536, 2880), (2112, 1344), (5000, 3000), (4160, 4160)]  # not x64


def gemm_shapes(designs) -> list[tuple[int, int]]:
    """Every ``(N, K)`` of the GEMMs the zoo launches for ``designs`` (ModelConfigs): fused
    q/k/v, output, FFN gate+up, FFN down, LM head; sorted, without repeats."""
    out = set()
    for c in designs:
        n_in = 2 if c.ffn_type == "swiglu" else 1
        out |= {(c.q_dim + 2 * c.kv_dim, c.d_model), (c.d_model, c.q_dim),
                (n_in * c.ffn_dim, c.d_model), (c.d_model, c.ffn_dim), (c.vocab_size, c.d_model)}
    return sorted(out)


def _timer(cuda: bool, reps: int):
    """``time(fn) -> spread (s)`` of one call: on a GPU a CUDA graph of ``n`` back-to-back calls
    replayed ``reps`` times (kernel time plus the graph's gap), on the CPU plain repeats."""
    import torch

    from ..measure.timing import spread

    def cpu(fn, n=1):
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return spread(ts)

    def gpu(fn, n=8):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                fn()
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / 1e3 / n)
        del g
        return spread(ts)

    return gpu if cuda else cpu


def _row(kind, sp, **shape) -> dict:
    return {"kind": kind, **shape, "time_s": sp["median"], "time_s_min": sp["min"],
            "time_s_p90": sp["p90"]}


def run(designs, device: str, quick: bool = False, log=print) -> list[dict]:
    """Measure every calibration entry for ``designs`` on ``device`` (``cuda`` or ``cpu``);
    returns the rows. ``quick`` is the reduced grid (the CPU's, and CI's)."""
    import torch
    import torch.nn.functional as F

    cuda = device == "cuda"
    dtype = "bf16" if cuda else "fp32"
    tdt = torch.bfloat16 if cuda else torch.float32
    tm = _timer(cuda, 7 if cuda else 5)
    rows = []
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape, dt=tdt):
        return torch.randn(*shape, device=device, dtype=dt, generator=g)

    # GEMMs: every (N, K) of the designs and some off the 64-grid, M in powers of two
    shapes = gemm_shapes(designs) + ([] if quick else OFF_GRID)
    m_max = 32768 if cuda else 512
    for N, K in shapes:
        w = rnd(N, K)
        for e in range(int(math.log2(m_max)) + 1):
            M = 2**e
            if M * max(N, K) * 2 > (2**31 if cuda else 2**26):  # bounded input size
                break
            x = rnd(M, K)
            sp = tm(lambda x=x, w=w: F.linear(x, w), n=2 if M * N * K > 2**36 else 8)
            rows.append(_row("gemm", sp, M=M, N=N, K=K, dtype=dtype, flops=2.0 * M * N * K))
        del w
    log(f"calibrate: {len(shapes)} GEMM shapes")
    rows += _attention(designs, device, tm, rnd, quick, dtype)
    log("calibrate: attention")
    rows += _elementwise(device, tm, rnd, quick)
    rows += _launch(device, tm)
    log("calibrate: elementwise and launch costs")
    return rows


def _attention(designs, device, tm, rnd, quick, dtype) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from zoo.model import grouped_decode_attention

    cuda = device == "cuda"
    rows = []
    impls = ["torch"] + (["triton"] if cuda else [])
    kvs = ["bf16", "int8", "fp8_e4m3"] if cuda else [dtype]
    grid = ([(1, 2, 4, 64, 16), (2, 2, 4, 128, 16), (2, 4, 2, 256, 32)] if quick else
            [(b, hkv, gq, s, d) for b in (1, 8, 64) for hkv in (1, 8, 32) for gq in (1, 4)
             for s in (512, 4096) for d in (64, 128) if b * hkv * s <= 64 * 8 * 4096])
    for impl in impls:
        for kvd in kvs:
            if impl == "torch" and kvd in ("int8", "fp8_e4m3"):
                continue
            for B, Hkv, G, S, D in grid:
                H = Hkv * G
                q = rnd(B, H, 1, D)
                cache = S + 64
                pos = torch.tensor([S - 1], device=device)
                if impl == "torch":
                    k, v = rnd(B, Hkv, S, D), rnd(B, Hkv, S, D)
                    mask = torch.ones(1, S, dtype=torch.bool, device=device)
                    sp = tm(lambda q=q, k=k, v=v, mask=mask: grouped_decode_attention(q, k, v, mask))
                    scale_b = 0
                else:
                    from kernels.decode_attention import decode_attention

                    if kvd == "bf16":
                        k, v, ks, vs, scale_b = rnd(B, Hkv, cache, D), rnd(B, Hkv, cache, D), \
                            None, None, 0
                    else:
                        t = torch.int8 if kvd == "int8" else torch.float8_e4m3fn
                        k = rnd(B, Hkv, cache, D, dt=torch.float32).clamp(-100, 100).to(t)
                        v = rnd(B, Hkv, cache, D, dt=torch.float32).clamp(-100, 100).to(t)
                        ks = torch.rand(B, Hkv, cache, device=device) / 100
                        vs = torch.rand(B, Hkv, cache, device=device) / 100
                        scale_b = 4
                    sp = tm(lambda q=q, k=k, v=v, ks=ks, vs=vs, pos=pos:
                            decode_attention(q, k, v, pos, ks, vs))
                kvb = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 1, "fp8_e4m3": 1}[kvd]
                rows.append(_row("decode_attn", sp, impl=impl, kv_dtype=kvd, B=B, Hkv=Hkv, G=G,
                                 S=S, D=D, bytes=2.0 * B * Hkv * S * (D * kvb + scale_b)))
                del k, v
    for T in ((16, 64, 256) if quick else (128, 512, 1024, 2048, 4096, 8192)):
        for D in ((16,) if quick else (64, 128)):
            BH = max(1, (2**21 if cuda else 2**14) // T)
            q, k, v = rnd(1, BH, T, D), rnd(1, BH, T, D), rnd(1, BH, T, D)
            sp = tm(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    n=2 if T >= 4096 else 8)
            rows.append(_row("prefill_attn", sp, T=T, D=D, BH=BH, flops=2.0 * BH * D * T * T))
    return rows


def _elementwise(device, tm, rnd, quick) -> list[dict]:
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
            rows.append(_row("elementwise", tm(fn), op=op, impl=impl, bytes=float(nbytes), M=M))
    return rows


def _launch(device, tm) -> list[dict]:
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

    t0 = time.perf_counter()
    for _ in range(5):
        eager()
    if device == "cuda":
        torch.cuda.synchronize()
    host = (time.perf_counter() - t0) / 5 / n
    rows.append(_row("launch", spread([host]), op="eager_op"))
    if device == "cuda":
        rows.append(_row("launch", tm(lambda: x.add_(1), n=n), op="graph_kernel"))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.add_(1)
        ts = []
        for _ in range(50):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            g.replay()
            ts.append(time.perf_counter() - t0)
        rows.append(_row("launch", spread(ts), op="graph"))
    else:
        rows.append(_row("launch", spread([0.0]), op="graph"))
    for impl in ("torch", "triton") if device == "cuda" else ("torch",):
        per_layer, fixed = _eager_host(device, impl)
        rows.append(_row("launch", spread([per_layer]), op=f"eager_layer_{impl}"))
        rows.append(_row("launch", spread([fixed]), op=f"eager_fixed_{impl}"))
    return rows


def _eager_host(device: str, impl: str) -> tuple[float, float]:
    """Host time (s) to issue one layer, and the rest of a forward (embedding, final norm, LM
    head), of the zoo's model run eagerly: forwards of a one-token step on a model of tiny
    dimensions (the GPU's work is negligible, so the wall time is the host's), with 2 and 6
    layers; per layer = the difference / 4 (fastest of 7 runs of 20 forwards each)."""
    import torch

    from zoo import ModelConfig, Transformer

    def host(n_layers):
        cfg = ModelConfig.from_name("tiny", n_layers=n_layers, kernels=impl,
                                    **({"dtype": "bf16", "kv_dtype": "bf16"}
                                       if device == "cuda" else {}))
        m = Transformer.build(cfg, device)
        m.setup_cache(1, 64)
        tok = torch.zeros(1, 1, dtype=torch.long, device=device)
        with torch.no_grad():
            for _ in range(10):
                m(tok, m.positions[10:11], kv_len=11)
            if device == "cuda":
                torch.cuda.synchronize()
            ts = []
            for _ in range(7):
                t0 = time.perf_counter()
                for _ in range(20):
                    m(tok, m.positions[10:11], kv_len=11)
                ts.append((time.perf_counter() - t0) / 20)
                if device == "cuda":
                    torch.cuda.synchronize()
        return min(ts)  # the host's own cost; slower repeats are other work on the machine

    a, b = host(2), host(6)
    per_layer = max((b - a) / 4, 0.0)
    return per_layer, max(a - 2 * per_layer, 0.0)


# ---- the cache ---------------------------------------------------------------------------

def paths(device_name: str) -> tuple[Path, Path]:
    """``(<device>.json, <device>.parquet)`` in ``results/calibration``."""
    base = CAL_DIR / slug(device_name)
    return base.with_suffix(".json"), base.with_suffix(".parquet")


def load(device_name: str, where: Path | None = None):
    """``(meta, table)`` of a cached calibration of ``device_name`` (or of the files at
    ``where``, a ``.json`` path), or None."""
    import pandas as pd

    meta_p, tab_p = (where, where.with_suffix(".parquet")) if where else paths(device_name)
    if not meta_p.exists() or not tab_p.exists():
        return None
    return json.loads(meta_p.read_text()), pd.read_parquet(tab_p)


def calibrate(device: dict, designs, refresh: bool = False, quick: bool | None = None,
              ceilings: dict | None = None, timeout_s: float = 900):
    """The device's calibration: cached in ``results/calibration/<device>.{json,parquet}``, else
    measured in a child process (``python -m sweep.analysis.calibrate --child``) over the GEMM
    shapes of ``designs``; ``ceilings`` (the device's measured ones) are kept in the meta, for a
    transfer to another device (``predict.transfer``). Returns ``(meta, table)``.

    Raises:
        RuntimeError: the measurement failed (the child's error tail in the message).
    """
    if not refresh and (have := load(device["name"])) is not None and \
            have[0].get("version") == VERSION:
        return have
    quick = device["type"] != "cuda" if quick is None else quick
    CAL_DIR.mkdir(parents=True, exist_ok=True)
    spec = CAL_DIR / f".{slug(device['name'])}.designs.json"
    write_json(spec, {"designs": [c.to_dict() for c in designs], "quick": quick,
                      "device": device["type"]})
    meta_p, tab_p = paths(device["name"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO),
                                                                    os.environ.get("PYTHONPATH")])))
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "sweep.analysis.calibrate", "--child", str(spec),
                        str(tab_p)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=timeout_s)
    if r.returncode != 0 or not tab_p.exists():
        raise RuntimeError(f"calibration failed: {(r.stderr or r.stdout).strip()[-800:]}")
    import pandas as pd

    table = pd.read_parquet(tab_p)
    meta = {"device": device["name"], "driver": device.get("driver"), **environment(device),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "quick": quick,
            "version": VERSION,
            "entries": len(table), "wall_s": round(time.time() - t0, 1),
            "kinds": table.kind.value_counts().to_dict(), "log": r.stdout[-2000:],
            "ceilings": {k: v for k, v in (ceilings or {}).items()
                         if k in ("copy_bytes_s", "gemm_flops_bf16", "gemm_flops_fp16",
                                  "gemm_flops_fp32")}}
    write_json(meta_p, meta)
    return meta, table


def _child(spec_path: str, out_path: str) -> int:
    import pandas as pd

    from zoo import ModelConfig

    spec = json.loads(Path(spec_path).read_text())
    designs = [ModelConfig.from_dict(d) for d in spec["designs"]]
    rows = run(designs, spec["device"], spec["quick"], log=lambda m: print(m, flush=True))
    write_atomic(Path(out_path), lambda p: pd.DataFrame(rows).to_parquet(p, index=False))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(_child(sys.argv[2], sys.argv[3]))
    print("usage: python -m sweep.calibrate [--refresh] [--quick] (this module's --child is "
          "internal)", file=sys.stderr)
    sys.exit(2)
