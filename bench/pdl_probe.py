"""Programmatic dependent launch on the decode GEMV's dot path (2-16 rows): safe, and worth it?

    python -m bench.pdl_probe race OUT.csv [WORKERS]   # every dot-path tile against a slow producer
    python -m bench.pdl_probe step OUT.csv             # decode steps, dot path with / without PDL
    python -m bench.pdl_probe boundary OUT.csv         # which boundary of the step gains or loses

``race``: a producer kernel lets its dependents launch at once (``gdc_launch_dependents`` first),
sleeps 200 us, then writes the GEMV's input over NaNs; the GEMV follows it on the stream with
``launch_pdl``. An activation load issued before the GEMV's wait reads NaN, so its output is
not finite. Each tile of the dot path's autotune space (``kernels.gemv._DOT``, with and without
``W_AHEAD``), each prologue, each wait (``PDL`` 1: ``gdc_wait``; 2: ``_gdc_wait_dep``, the
shipped one), and a consumer with no wait at all (the check's own control: it must read NaN).
Columns: ``nonfinite`` output elements, ``max_abs_diff`` against the same tile launched without
PDL after the producer finished, and ``loads_before_wait``: global loads (``ld.global``,
``cp.async``) in the kernel's PTX before ``griddepcontrol.wait`` (the weight tile ``W_AHEAD``
loads there on purpose). Tiles are spread over ``WORKERS`` processes (their compiles dominate).

``step``: the main job's designs and the bench's shapes at batch 8 (the dot path), decoded in
CUDA graphs with the dot path launched without PDL (``kernels.gemv.DOT_PDL`` 0, the path before)
and with it (2), in alternation, autotuned (the PDL variant's tile choices are tuned here on
first use unless shipped); ms per step (median of 5 runs of 32 steps). Then the same designs with
fixed tiles (``switches.autotune=False``): the logits of 8 steps must be bit-identical.
(Recorded in ``results/reference/pdl_probe/``, with a variant since removed: 4 or 16 MB of the
next kernel's weights prefetched into L2 before its wait, ``cp.async.bulk.prefetch.L2``: within
+-2% of PDL alone.)
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from bench.gpu import write_rows
from kernels import gemv as G
from kernels import switches

NS_SLEEP = 300_000  # the producer's sleep, ns: far longer than a launch
SHAPES = [("qkv_768", 8, 1280, 768, "norm"), ("w2_768", 8, 768, 2048, "swiglu"),
          ("out_768", 8, 768, 768, "none"), ("1b_qkv_g32", 8, 2176, 2048, "norm"),
          ("1b_w2", 8, 2048, 8192, "swiglu"), ("1b_out_m2", 2, 2048, 2048, "none"),
          ("1b_w13_m16", 16, 16384, 2048, "norm")]


@triton.jit
def _timer(like):
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [like], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _slow_copy(src_ptr, dst_ptr, n, NS: tl.constexpr, BLOCK: tl.constexpr):
    """Let the next kernel launch, sleep ``NS`` ns, then copy ``src`` into ``dst``."""
    tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    t0 = _timer(pid)
    t = t0
    while t - t0 < NS:
        t = _timer(pid)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _no_wait_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """The control: launched with ``launch_pdl``, reads ``x`` without waiting."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _produce(src, dst):
    n = src.numel()
    dst.fill_(float("nan"))
    _slow_copy[(triton.cdiv(n, 4096),)](src, dst, n, NS=NS_SLEEP, BLOCK=4096)


def _gemv_launch(x, w, nw, r, y, h, prologue, cfg, mode):
    """The GEMV kernel launched as ``kernels.gemv.gemv`` does, with wait ``mode`` (0: no PDL);
    returns the compiled kernel."""
    M, N, K = x.shape[0], w.shape[0], w.shape[1]
    ws, ssw, cnt = G._workspace(x.device, M, N)
    has_res = prologue == "norm"
    meta = {**cfg}
    nwarps, nstages = meta.pop("num_warps"), meta.pop("num_stages")
    grid = (triton.cdiv(N, meta["BLOCK_N"]), meta["SPLIT_K"])
    return G._gemv_kernel[grid](
        x, r, nw, h, w, w, y, ws, ssw, cnt, M, N, K, 1e-5, x.stride(0), r.stride(0),
        h.stride(0), w.stride(0), y.stride(0), PROLOGUE=G.PROLOGUES.index(prologue),
        HAS_RES=has_res, HAS_BIAS=False, BLOCK_M=16, PDL=mode, TRIGGER=True, F32=False,
        IEEE=False,
        PREFETCH_X=0, num_warps=nwarps, num_stages=nstages,
        **({"launch_pdl": True} if mode else {}), **meta)


def _loads_before_wait(ptx: str) -> int:
    i = ptx.find("griddepcontrol.wait")
    if i < 0:
        return -1
    return len(re.findall(r"\b(ld\.global|cp\.async)", ptx[:i]))


def _tiles():
    return [dict(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sk, num_warps=w, num_stages=st, W_AHEAD=wa)
            for bn, bk, sk, w, st in G._DOT for wa in (0, 1)]


def race_part(out_csv: str, part: int, parts: int) -> None:
    dev = "cuda"
    rows = []
    jobs = [(s, t, m) for s in SHAPES for t in _tiles() for m in (1, 2)]
    for i, (shape, cfg, mode) in enumerate(jobs):
        if i % parts != part:
            continue
        name, M, N, K, prologue = shape
        torch.manual_seed(0)
        kin = 2 * K if prologue == "swiglu" else K
        src = torch.randn(M, kin, device=dev, dtype=torch.bfloat16)
        x = torch.empty_like(src)
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
        nw = torch.ones(K, device=dev, dtype=torch.bfloat16)
        r = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        h = torch.empty(M, K, device=dev, dtype=torch.bfloat16)
        row = dict(shape=name, M=M, N=N, K=K, prologue=prologue, mode=mode,
                   tile="/".join(str(cfg[k]) for k in ("BLOCK_N", "BLOCK_K", "SPLIT_K",
                                                      "num_warps", "num_stages", "W_AHEAD")))
        try:
            x.copy_(src)
            _gemv_launch(x, w, nw, r, y, h, prologue, cfg, 0)
            torch.cuda.synchronize()
            ref = y.float().clone()
            worst_nf, worst_diff = 0, 0.0
            for _ in range(3):
                y.zero_()
                _produce(src, x)
                k = _gemv_launch(x, w, nw, r, y, h, prologue, cfg, mode)
                torch.cuda.synchronize()
                nf = int((~torch.isfinite(y.float())).sum())
                diff = float((y.float() - ref).abs().nan_to_num(float("inf")).max())
                worst_nf, worst_diff = max(worst_nf, nf), max(worst_diff, diff)
            row.update(nonfinite=worst_nf, max_abs_diff=worst_diff,
                       loads_before_wait=_loads_before_wait(k.asm["ptx"]))
        except Exception as e:  # a tile that does not fit (shared memory) is skipped
            row.update(nonfinite=-1, max_abs_diff=float("nan"), loads_before_wait=-1,
                       error=f"{type(e).__name__}: {str(e)[:80]}")
        rows.append(row)
    if part == 0:  # the control: a dependent that reads without waiting must see NaN
        src = torch.randn(8, 2048, device=dev, dtype=torch.bfloat16)
        x, y = torch.empty_like(src), torch.zeros_like(src)
        _no_wait_copy[(4,)](src, y, src.numel(), BLOCK=4096, launch_pdl=True)  # compiled
        _produce(src, x)  # compiled
        torch.cuda.synchronize()
        nf = []
        for _ in range(3):
            _produce(src, x)
            _no_wait_copy[(4,)](x, y, src.numel(), BLOCK=4096, launch_pdl=True)
            torch.cuda.synchronize()
            nf.append(int((~torch.isfinite(y.float())).sum()))
        rows.append(dict(shape="control_no_wait", M=8, N=0, K=2048, prologue="none", mode=-1,
                         tile="", nonfinite=min(nf), max_abs_diff=float("nan"),
                         loads_before_wait=-1))
    write_rows(out_csv, rows)


def race(out_csv: str, workers: int = 8) -> None:
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, "-m", "bench.pdl_probe", "race-part",
                               f"{out_csv}.part{i}", str(i), str(workers)])
             for i in range(workers)]
    rcs = [p.wait() for p in procs]
    rows = []
    for i in range(workers):
        part = Path(f"{out_csv}.part{i}")
        if part.exists():
            with part.open() as f:
                rows += list(csv.DictReader(f))
            part.unlink()
    write_rows(out_csv, rows)
    bad = {}
    for r in rows:
        key = (r["mode"], r["prologue"])
        bad.setdefault(key, [0, 0])
        bad[key][1] += 1
        if r["mode"] == "-1":  # the control must read early
            bad[key][0] += r["nonfinite"] in ("0", "-1")
        elif r["nonfinite"] != "0" or float(r["max_abs_diff"]) > 0.5:
            bad[key][0] += 1
    print(f"race: {len(rows)} rows in {time.time() - t0:.0f} s, worker rcs {rcs}")
    for (mode, pro), (nb, n) in sorted(bad.items()):
        what = "control did not read early" if mode == "-1" else "read early, differ or failed"
        print(f"  mode {mode} prologue {pro}: {nb} of {n} {what}")


VARIANTS = {"no_pdl": 0, "pdl": 2}  # kernels.gemv.DOT_PDL
DESIGNS = [  # name, preset, overrides, batch, prompt
    ("g32_b8_4k", "llama3_2_1b", {"n_kv_heads": 1}, 8, 4096),
    ("g4_b8_4k", "llama3_2_1b", {"n_kv_heads": 8}, 8, 4096),
    ("g1_b8_4k", "llama3_2_1b", {"n_kv_heads": 32}, 8, 4096),
    ("1b_b8_512", "llama3_2_1b", {}, 8, 512),
    ("8b_b8_512", "llama3_1_8b", {}, 8, 512),
    ("1b_b1_512", "llama3_2_1b", {}, 1, 512),
    ("d64_w768_b8", "llama3_2_1b", dict(n_layers=64, d_model=768, n_heads=12, n_kv_heads=4,
                                        head_dim=64, ffn_dim=2048), 8, 512),
]


def _decode(model, B, prompt_len, steps, runs, keep_logits=False):
    """``runs`` timed runs of ``steps`` graphed decode steps after one prefill: ms per step of
    each run, and the logits of the first run if ``keep_logits``."""
    from zoo import Generator

    cfg = model.cfg
    gen = Generator(model, B, prompt_len + steps * runs + 8, "cudagraph")
    g = torch.Generator(device="cuda").manual_seed(1)
    prompt = torch.randint(0, cfg.vocab_size, (B, prompt_len), device="cuda", generator=g)
    tok = gen.prefill(prompt).argmax(-1, keepdim=True)
    tok = gen.decode(tok).argmax(-1, keepdim=True)  # the graph captured, tiles chosen
    ms, logits = [], []
    for _ in range(runs):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(steps):
            lg = gen.decode(tok)
            if keep_logits and not ms:
                logits.append(lg.float().cpu())
            tok = lg.argmax(-1, keepdim=True)
        b.record()
        torch.cuda.synchronize()
        ms.append(a.elapsed_time(b) / steps)
    del gen
    return ms, (torch.stack(logits) if logits else None)


def step(out_csv: str) -> None:
    from zoo import ModelConfig, Transformer

    rows = []
    for name, preset, over, B, T in DESIGNS:
        cfg = ModelConfig.from_name(preset, **over).resolved("cuda")
        model = Transformer.build(cfg, "cuda", seed=0)
        t0 = time.time()
        times = {v: [] for v in VARIANTS}
        for rnd in range(2):  # alternate (the first round tunes and compiles)
            for v, mode in VARIANTS.items():
                G.DOT_PDL = mode
                ms, _ = _decode(model, B, T, 32, 5 if rnd else 1)
                if rnd:
                    times[v] += ms
        with switches.use(autotune=False):  # fixed tiles: the wait alone differs
            logits = {}
            for v, mode in VARIANTS.items():
                G.DOT_PDL = mode
                _, logits[v] = _decode(model, B, T, 8, 1, keep_logits=True)
        G.DOT_PDL = 2
        med = {v: sorted(t)[len(t) // 2] for v, t in times.items()}
        base = logits["no_pdl"]
        row = dict(design=name, batch=B, prompt=T)
        for v in VARIANTS:
            row[f"ms_{v}"] = round(med[v], 4)
            row[f"gain_pct_{v}"] = round(100 * (med["no_pdl"] / med[v] - 1), 2)
        for v in VARIANTS:
            row[f"ms_all_{v}"] = json.dumps([round(t, 4) for t in times[v]])
            row[f"fixed_identical_{v}"] = bool(torch.equal(base, logits[v]))
            row[f"fixed_nonfinite_{v}"] = int((~torch.isfinite(logits[v])).sum())
        row["wall_s"] = round(time.time() - t0)
        rows.append(row)
        print(json.dumps(row), flush=True)
        write_rows(out_csv, rows)
        del model
        torch.cuda.empty_cache()


BOUNDARY_VARIANTS = {  # (kernels.gemv.DOT_PDL, attention launched with PDL, out_proj with PDL)
    "all": (2, True, True), "attn_not_early": (2, False, True), "out_proj_no_pdl": (2, True, False),
    "no_dot_pdl": (0, True, True)}
BOUNDARY_DESIGNS = [d for d in DESIGNS if d[0].endswith("_4k")] + [
    ("g2_b8_4k", "llama3_2_1b", {"n_kv_heads": 16}, 8, 4096)]


def boundary(out_csv: str) -> None:
    """Which boundary of the batch-8 step gains or loses under PDL: the main job's designs with
    the dot path under PDL (``all``), the decode attention launched without the PDL attribute
    (so it starts when the qkv GEMV ends: ``attn_not_early``), the out_proj GEMV launched without
    PDL (``out_proj_no_pdl``), the dot path without PDL (``no_dot_pdl``); ms per step as ``step``."""
    from kernels import decode_linear, tuning
    from zoo import ModelConfig, Transformer

    state = {"attn": True, "out": True}
    launch, gemv = tuning.launch, decode_linear.gemv

    def launch_(name, kernel, tuner, grid, args, kwargs, *rest):
        if name == "decode_attention" and not state["attn"]:
            kwargs = {k: v for k, v in kwargs.items() if k != "launch_pdl"}
        return launch(name, kernel, tuner, grid, args, kwargs, *rest)

    def gemv_(x, w, b=None, prologue="none", *a, **kw):  # out_proj: the one GEMV without prologue
        if prologue == "none" and not state["out"]:
            kw["pdl"] = False
        return gemv(x, w, b, prologue, *a, **kw)

    tuning.launch, decode_linear.gemv = launch_, gemv_
    rows = []
    for name, preset, over, B, T in BOUNDARY_DESIGNS:
        cfg = ModelConfig.from_name(preset, **over).resolved("cuda")
        model = Transformer.build(cfg, "cuda", seed=0)
        times = {v: [] for v in BOUNDARY_VARIANTS}
        for rnd in range(2):
            for v, (mode, attn, out) in BOUNDARY_VARIANTS.items():
                G.DOT_PDL, state["attn"], state["out"] = mode, attn, out
                ms, _ = _decode(model, B, T, 32, 5 if rnd else 1)
                if rnd:
                    times[v] += ms
        G.DOT_PDL, state["attn"], state["out"] = 2, True, True
        row = dict(design=name, batch=B, prompt=T)
        for v, t in times.items():
            row[f"ms_{v}"] = round(sorted(t)[len(t) // 2], 4)
        for v, t in times.items():
            row[f"ms_all_{v}"] = json.dumps([round(x, 4) for x in t])
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if "all" not in k or k == "ms_all"}),
              flush=True)
        write_rows(out_csv, rows)
        del model
        torch.cuda.empty_cache()




if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "race":
        race(args[0], int(args[1]) if len(args) > 1 else 8)
    elif cmd == "race-part":
        race_part(args[0], int(args[1]), int(args[2]))
    elif cmd == "step":
        step(args[0])
    elif cmd == "boundary":
        boundary(args[0])
    else:
        raise SystemExit(__doc__)
