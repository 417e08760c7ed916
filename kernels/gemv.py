"""Skinny GEMM for decode (``M <= 16`` rows): ``y = prologue(x) @ W^T (+ bias)``, bandwidth-bound.

At decode, every linear layer multiplies a few activation rows (``M = batch``) by a weight read once
from DRAM: the step's time is the weight bytes over the memory bandwidth. One program owns
``BLOCK_N`` output channels, streams their ``[BLOCK_N, K]`` weight rows in ``[BLOCK_N, BLOCK_K]``
tiles (16-byte vector loads, pipelined), and accumulates in float32; for ``M == 1`` the products
are summed on the CUDA cores, for ``1 < M <= 16`` the rows (padded to 16) go through ``tl.dot``.

Prologues fold the kernel before the GEMM into its input, so the layer runs one launch fewer:
- ``norm``: ``h = x + residual`` (written once, by program 0: the new residual stream) and
  RMSNorm (Zhang & Sennrich 2019). The per-row ``rstd = 1 / sqrt(mean(h^2) + eps)`` is a scalar per
  row, so ``rmsnorm(h) @ W^T = rstd * ((h * norm_weight) @ W^T)``: the sum of squares accumulates
  in the same pass over K as the products, and ``rstd`` scales the accumulator at the end.
  (The reference rounds ``h * rstd`` to the activation dtype before the weight multiply; here
  ``h * norm_weight`` is rounded: the same one rounding, at another point.)
- ``swiglu``: ``x = silu(gate) * up`` from the stacked ``[M, 2K]`` gate|up GEMM output, computed
  per K tile (the torch rounding of ``silu`` kept).

Hopper programmatic dependent launch (PDL, CUDA 12 ``griddepcontrol``; Triton's
``gdc_wait``/``gdc_launch_dependents``): with ``pdl``, each program waits for the previous
kernel's memory before its first load and lets the next kernel launch once its main loop is done,
so inside a CUDA graph a kernel's launch overlaps its predecessor's tail. (Triggering at the
program's start instead let chains of small kernels sit resident on the SMs and measured
slower.) On the dot path the activations' addresses depend on the wait (``_gdc_wait_dep``), so no
schedule of the compiler's can load them before it. It needs compute capability >= 9 and a
Triton with ``launch_pdl``.

Minimum DRAM traffic per call: ``N * K * bytes(W)`` (plus ``M * (K + N)`` activations). The
decode step calls it through ``kernels.decode_linear.linear``, which picks, per shape and
prologue, this kernel or cuBLAS (after the prologue as its own kernel), whichever measured
faster on the first call.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from . import switches, tuning
from .graph_timing import graph_bench

PROLOGUES = ("none", "norm", "swiglu")
MAX_M = 16


@triton.jit
def _gemv_kernel(x_ptr, r_ptr, nw_ptr, h_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, ss_ptr, cnt_ptr,
                 M, N, K, eps, s_xm, s_rm, s_hm, s_wn, s_ym,
                 PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr, HAS_BIAS: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 SPLIT_K: tl.constexpr, PREFETCH_X: tl.constexpr, W_AHEAD: tl.constexpr,
                 PDL: tl.constexpr, TRIGGER: tl.constexpr, F32: tl.constexpr,
                 IEEE: tl.constexpr):
    # PROLOGUE: 0 none, 1 (residual add +) RMSNorm, 2 SwiGLU of a stacked [M, 2K] input.
    # The tile is computed transposed, acc [BLOCK_N, BLOCK_M] = W_tile @ x^T ("swap AB": the
    # weight rows fill the tensor core's M dimension, the few activation rows its N).
    # One row (BLOCK_M 1) prefetches the next weight tile by hand (the compiler pipelines only
    # tl.dot's operands), and the first before waiting on the previous kernel: weights do not
    # depend on it, so under PDL they stream while it finishes. With PREFETCH_X it prefetches
    # the next activation tiles too (x; residual and norm weight, or gate and up): without, each
    # K step waits for their L2 round trip before its products. W_AHEAD does the weights' hand
    # prefetch (the first tile before the PDL wait) for the dot path too, in place of the
    # compiler's pipelining of tl.dot's operands: the autotuner keeps whichever is faster
    # (H100, batch 8: Llama-3.2-1B 5747 -> 5884 tok/s, Llama-3.1-8B 1287 -> 1278, within the
    # spread; results/reference/bench_h100_v3_dev/).
    AHEAD: tl.constexpr = BLOCK_M == 1 or W_AHEAD
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = offs_m < M
    nmask = offs_n < N
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    ss = tl.zeros([BLOCK_M], tl.float32)
    dt = w_ptr.dtype.element_ty
    k_len = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_start = pid_k * k_len
    k_end = tl.minimum(k_start + k_len, K)
    w_rows = w_ptr + offs_n[:, None] * s_wn
    first = (tl.zeros([BLOCK_M], tl.int32) + pid_n) == 0  # column 0 writes h
    if AHEAD:
        offs_k = k_start + tl.arange(0, BLOCK_K)
        w_next = tl.load(w_rows + offs_k[None, :], mask=nmask[:, None] & (offs_k < k_end)[None, :],
                         other=0.0)
    if PDL == 1:  # now wait for the previous kernel's writes (our activations)
        tl.extra.cuda.gdc_wait()
    elif PDL == 2:  # the same wait, with the activations' addresses depending on it
        dep = _gdc_wait_dep(pid_n) * 16  # 0; a multiple of 16 keeps the 16-byte vector loads
        x_ptr += dep
        r_ptr += dep
    if PREFETCH_X:
        p0_next, p1_next, nw_next = _act_load(x_ptr, r_ptr, nw_ptr, offs_m, k_start
                                              + tl.arange(0, BLOCK_K), mmask, k_end, K, s_xm,
                                              s_rm, PROLOGUE, HAS_RES)
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        if PREFETCH_X:
            p0, p1, nw = p0_next, p1_next, nw_next
            p0_next, p1_next, nw_next = _act_load(x_ptr, r_ptr, nw_ptr, offs_m, offs_k + BLOCK_K,
                                                  mmask, k_end, K, s_xm, s_rm, PROLOGUE, HAS_RES)
        else:
            p0, p1, nw = _act_load(x_ptr, r_ptr, nw_ptr, offs_m, offs_k, mmask, k_end, K, s_xm,
                                   s_rm, PROLOGUE, HAS_RES)
        xmask = mmask[:, None] & (offs_k < K)[None, :]
        if PROLOGUE == 2:
            g = p0.to(tl.float32)
            a = ((g * tl.sigmoid(g)).to(dt).to(tl.float32) * p1.to(tl.float32)).to(dt)
        elif PROLOGUE == 1:
            a = p0
            if HAS_RES:
                a = (a.to(tl.float32) + p1.to(tl.float32)).to(dt)
                tl.store(h_ptr + offs_m[:, None] * s_hm + offs_k[None, :], a,
                         mask=xmask & first[:, None])
            hf = a.to(tl.float32)
            ss += tl.sum(hf * hf, axis=1)
            a = (hf * nw.to(tl.float32)[None, :]).to(dt)
        else:
            a = p0
        if AHEAD:
            w = w_next
            nk = offs_k + BLOCK_K
            w_next = tl.load(w_rows + nk[None, :], mask=nmask[:, None] & (nk < k_end)[None, :],
                             other=0.0)
        else:
            w = tl.load(w_rows + offs_k[None, :], mask=nmask[:, None] & (offs_k < K)[None, :],
                        other=0.0)
        if BLOCK_M == 1:
            acc += tl.sum(w.to(tl.float32) * a.to(tl.float32), axis=1)[:, None]
        elif F32:  # the interpreter computes bf16 on raw bits: float32 math there
            acc = tl.dot(w.to(tl.float32), tl.trans(a.to(tl.float32)), acc)
        elif IEEE:  # a float32 design: no TF32 rounding of the operands
            acc = tl.dot(w, tl.trans(a), acc, input_precision="ieee")
        else:
            acc = tl.dot(w, tl.trans(a), acc)
    if PDL > 0 and TRIGGER:  # the main loop is done: let the next kernel's programs take the
        tl.extra.cuda.gdc_launch_dependents()  # free SMs (without TRIGGER: when this one ends)
    omask = nmask[:, None] & mmask[None, :]
    if SPLIT_K > 1:  # partial sums into the float32 workspace; the column's last program ends it
        wsp = ws_ptr + offs_m[None, :] * N + offs_n[:, None]
        tl.atomic_add(wsp, acc, mask=omask, sem="relaxed")
        if PROLOGUE == 1:
            tl.atomic_add(ss_ptr + pid_n * BLOCK_M + offs_m, ss, mask=mmask, sem="relaxed")
        tl.debug_barrier()  # every thread's partials before the count (CUDA's grid-sync pattern)
        if tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel") == SPLIT_K - 1:
            tl.debug_barrier()
            acc = tl.load(wsp, mask=omask, other=0.0, cache_modifier=".cg")
            ssp = ss_ptr + pid_n * BLOCK_M + offs_m
            if PROLOGUE == 1:
                ss = tl.load(ssp, mask=mmask, other=0.0, cache_modifier=".cg")
            # every thread has read before any thread zeroes: the loads and the zeroing stores
            # are laid out over the threads differently (the sums of squares always, the partial
            # sums on some tiles), so without this barrier a thread could zero what another had
            # not read yet; on an H200, 15-23 of the 135 dot-path tiles gave wrong outputs
            # (results/reference/gemv_sync_probe/)
            tl.debug_barrier()
            tl.store(wsp, tl.zeros([BLOCK_N, BLOCK_M], tl.float32), mask=omask)
            if PROLOGUE == 1:
                tl.store(ssp, tl.zeros([BLOCK_M], tl.float32), mask=mmask)
            tl.store(cnt_ptr + pid_n, 0)
            _epilogue(acc, ss, b_ptr, y_ptr, offs_m, offs_n, omask, nmask, s_ym, K, eps, dt,
                      PROLOGUE, HAS_BIAS)
    else:
        _epilogue(acc, ss, b_ptr, y_ptr, offs_m, offs_n, omask, nmask, s_ym, K, eps, dt,
                  PROLOGUE, HAS_BIAS)


@triton.jit
def _gdc_wait_dep(like):
    """``griddepcontrol.wait`` (as ``gdc_wait``) returning an int32 0 that the compiler cannot
    see through: addresses offset by it cannot be loaded before the wait, whatever the schedule.
    Triton's software pipelining does not treat ``gdc_wait`` as a barrier (triton-lang/triton
    #11905: a dependent ``tl.dot`` operand loaded ahead of a wait inside the loop).
    ``like``: any int32 scalar (the asm's operand)."""
    return tl.inline_asm_elementwise("griddepcontrol.wait;\n\tmov.u32 $0, 0;", "=r,r", [like],
                                     dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _act_load(x_ptr, r_ptr, nw_ptr, offs_m, offs_k, mmask, k_end, K, s_xm, s_rm,
              PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr):
    """The activation tiles at ``offs_k`` (masked at ``k_end``), raw: ``(x, residual, norm
    weight)`` for the norm prologue, ``(gate, up, -)`` for SwiGLU, ``(x, -, -)`` without; an
    unused slot holds a tile already loaded (no load)."""
    xmask = mmask[:, None] & (offs_k < k_end)[None, :]
    xp = x_ptr + offs_m[:, None] * s_xm + offs_k[None, :]
    p0 = tl.load(xp, mask=xmask, other=0.0)
    p1 = p0
    nw = offs_k
    if PROLOGUE == 2:
        p1 = tl.load(xp + K, mask=xmask, other=0.0)
    if PROLOGUE == 1:
        if HAS_RES:
            p1 = tl.load(r_ptr + offs_m[:, None] * s_rm + offs_k[None, :], mask=xmask, other=0.0)
        nw = tl.load(nw_ptr + offs_k, mask=offs_k < k_end, other=0.0)
    return p0, p1, nw


@triton.jit
def _epilogue(acc, ss, b_ptr, y_ptr, offs_m, offs_n, omask, nmask, s_ym, K, eps, dt,
              PROLOGUE: tl.constexpr, HAS_BIAS: tl.constexpr):
    if PROLOGUE == 1:
        acc = acc * (1.0 / tl.sqrt(ss / K + eps))[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=nmask, other=0.0).to(tl.float32)[:, None]
    tl.store(y_ptr + offs_m[None, :] * s_ym + offs_n[:, None], acc.to(dt), mask=omask)


# Tile width, K step, split of K, warps and pipeline depth, tuned per (M bucket, N, K, prologue)
# on the GPU by Triton's autotuner inside a CUDA graph, the choice kept per device
# (``kernels.tuning``); the interpreter and ``switches.autotune=False`` run _FIXED. One row
# (BLOCK_M 1) sums on the CUDA cores: narrow tiles, many programs; more rows go through tl.dot,
# whose weight tile fills the tensor core's 64-row (wgmma) or 16-row dimension.
_M1 = [(bn, bk, sk, w, st) for bn, bk, w, st in ((4, 1024, 4, 2), (8, 512, 4, 3), (8, 1024, 4, 2),
                                                 (16, 256, 4, 3), (16, 512, 4, 2), (32, 256, 4, 3))
       for sk in (1, 4)]
# The dot path's 128-row tiles (8 warps for 128 x 128) came from a sweep of 76 tiles over the
# 1B / 8B batch-8 projections (results/reference/gemv_probe/): on an H200 the MLP's w13 went from
# 71% to 84% of the copy bandwidth, the 8B's w13 / w2 from 80 / 77% to 93 / 88%.
_DOT = [(bn, bk, sk, w, st) for bn, bk, w, st in ((64, 128, 4, 4), (64, 256, 4, 3), (32, 128, 4, 4),
                                                  (16, 256, 4, 3), (128, 64, 4, 4),
                                                  (128, 128, 8, 4), (128, 128, 4, 4),
                                                  (128, 64, 8, 4))
        for sk in (1, 4, 8)]
# Tried on every new dot-path shape beside the configs chosen for the kernel's other shapes
# (``tuning.candidates``): one per shape class of that sweep (a wide N in one split, a short N
# split 4 or 8), so the first shapes tuned on a device do not bound the later ones to tiles that
# suit only them (the shipped H100 choices had collapsed to two 64-row tiles that way).
_SEEDS = [dict(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sk, PREFETCH_X=0, W_AHEAD=0, num_warps=w,
               num_stages=st)
          for bn, bk, sk, w, st in ((128, 128, 1, 8, 4), (128, 128, 4, 8, 4), (128, 128, 8, 4, 4),
                                    (128, 64, 8, 4, 4), (64, 128, 4, 4, 4))]
_CONFIGS = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sk, "PREFETCH_X": px,
                           "W_AHEAD": wa},
                          num_warps=w, num_stages=st)
            for bn, bk, sk, w, st in dict.fromkeys(_M1 + _DOT)
            for px in ((0, 1) if (bn, bk, sk, w, st) in _M1 else (0,))
            for wa in ((0, 1) if (bn, bk, sk, w, st) in _DOT else (0,))]
_FIXED = {"BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 1, "PREFETCH_X": 0, "W_AHEAD": 0,
          "num_warps": 4, "num_stages": 3}
# How the dot path (2-16 rows) launches under ``switches.pdl``: 2, waiting through
# ``_gdc_wait_dep``; 0 without PDL (the path of 2026-11-24 to 27: bench.pdl_probe's before);
# 1 waiting through ``gdc_wait`` (the one-row path's; bench.pdl_probe's race check)
DOT_PDL = 2
_ALLOWED: list = []  # the configs a new shape's autotuning is bounded to (``tuning.candidates``)


def _prune(configs, nargs, **kw):
    # switches.gemv_prefetch=False leaves PREFETCH_X out, gemv_w_ahead=False W_AHEAD (the
    # before/after of those levers); a shape new to this device tries the configs chosen for the
    # kernel's other shapes only (_ALLOWED), when there are any
    sw = switches.current()
    one = kw.get("BLOCK_M", nargs.get("BLOCK_M")) == 1
    keep = set(_M1 if one else _DOT)
    px = one and sw.gemv_prefetch
    wa = not one and sw.gemv_w_ahead
    # (a tile in both lists carries both switches: each path keeps its own)
    out = [c for c in configs if (c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.kwargs["SPLIT_K"],
                                  c.num_warps, c.num_stages) in keep
           and (px or not c.kwargs["PREFETCH_X"]) and (wa or not c.kwargs["W_AHEAD"])]
    seeds = [] if one or not _ALLOWED else _SEEDS
    bounded = [c for c in out if tuning.config_dict(c) in _ALLOWED + seeds]
    return bounded or out


_tuned = triton.autotune(_CONFIGS, key=["BLOCK_M", "N", "K", "PROLOGUE", "HAS_RES"],
                         prune_configs_by={"early_config_prune": _prune},
                         do_bench=graph_bench)(_gemv_kernel)
_WORKSPACE: dict = {}


def _workspace(device: torch.device, M: int, N: int):
    """Zeroed float32 partial sums ``[M, N]``, sums of squares and int32 counters per column tile
    for split-K, allocated once per (device, M, N) before any capture (the first call is a
    warm-up) and left zeroed by every call (the last program of a column resets its part)."""
    key = (device, M, N)
    if key not in _WORKSPACE:
        _WORKSPACE[key] = (torch.zeros(M * N, device=device, dtype=torch.float32),
                           torch.zeros(N * 16, device=device, dtype=torch.float32),
                           torch.zeros(N, device=device, dtype=torch.int32))
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # zeroed before any stream uses it
    return _WORKSPACE[key]


def _interpreted(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" or os.environ.get("TRITON_INTERPRET") == "1"


def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch: a CUDA device of compute capability >= 9 (Hopper), a Triton
    that exposes it, and ``switches.pdl`` on (the device's answer is kept for the process, off
    the decode step's host path)."""
    if device.type != "cuda" or not switches.current().pdl:
        return False
    return _pdl_cuda(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _pdl_cuda(index: int) -> bool:
    if not hasattr(tl.extra, "cuda") or not hasattr(tl.extra.cuda, "gdc_wait"):
        return False
    return torch.cuda.get_device_capability(index)[0] >= 9


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         prologue: str = "none", norm_weight: torch.Tensor | None = None, eps: float = 1e-5,
         residual: torch.Tensor | None = None, pdl: bool | None = None,
         config: dict | None = None, pdl_trigger: bool = True):
    """``y = prologue(x) @ weight.T (+ bias)`` for ``M <= 16`` rows, one Triton launch.

    Args:
        x: ``[..., K]`` (``[..., 2K]`` for ``swiglu``), rows of ``M = x.numel() / x.shape[-1]``.
        weight: ``[N, K]`` (nn.Linear layout), last dim contiguous, same dtype as ``x``.
        bias: ``[N]`` or None.
        prologue: ``none``, ``norm`` (RMSNorm with ``norm_weight [K]`` and ``eps``, after adding
            ``residual`` if given) or ``swiglu``.
        pdl: launch with programmatic dependent launch (default: ``pdl_supported``).
        pdl_trigger: under PDL, let the next kernel launch once this one's main loop is done
            (False: when this one ends). The decode step's qkv GEMV passes False: its successor,
            decode attention, launched early lost 5% of the step at 2-4 query heads per KV head
            on an H200 (results/reference/pdl_probe/). Not part of the tuning key.
        config: a fixed tile config (``BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages``,
            optionally ``PREFETCH_X``: the next activation tiles loaded a step ahead, one row
            only; ``W_AHEAD``: the weight tiles loaded a step ahead by hand on the dot path, as
            one row always does) instead of the tuned one (tests).

    Returns:
        ``y [..., N]``; with ``prologue='norm'`` and a residual, ``(y, h)`` where ``h = x +
        residual [..., K]`` is the new residual stream.

    Raises:
        ValueError: more than 16 rows, an unknown prologue, or mismatched widths.
    """
    if prologue not in PROLOGUES:
        raise ValueError(f"prologue must be one of {PROLOGUES}, got {prologue!r}")
    N, K = weight.shape
    kin = 2 * K if prologue == "swiglu" else K
    if x.shape[-1] != kin:
        raise ValueError(f"x's last dim {x.shape[-1]} != {kin} (weight {tuple(weight.shape)}, "
                         f"prologue {prologue})")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, kin)
    M = x2.shape[0]
    if M > MAX_M:
        raise ValueError(f"gemv takes at most {MAX_M} rows, got {M}")
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    assert weight.stride(-1) == 1
    y = torch.empty(M, N, device=x.device, dtype=weight.dtype)
    has_res = prologue == "norm" and residual is not None
    r2 = residual.reshape(-1, K).contiguous() if has_res else x2
    h = torch.empty_like(r2) if has_res else y
    interp = _interpreted(x)
    # The dot path (2-16 rows) waits through ``_gdc_wait_dep``; it ran without PDL 2026-11-24 to
    # 27 (NaN logits on an H200 then; none of its tiles reads early now, with either wait:
    # results/reference/pdl_probe/)
    pdl = (pdl_supported(x.device) if pdl is None else pdl) and not interp
    pdl_mode = (1 if M == 1 else DOT_PDL) if pdl else 0
    ws, ssw, cnt = _workspace(x.device, M, N)
    args = (x2, r2, norm_weight if norm_weight is not None else weight,
            h, weight, bias if bias is not None else weight, y, ws, ssw, cnt, M, N, K, eps,
            x2.stride(0), r2.stride(0), h.stride(0), weight.stride(0), y.stride(0))
    meta = dict(PROLOGUE=PROLOGUES.index(prologue), HAS_RES=has_res, HAS_BIAS=bias is not None,
                BLOCK_M=1 if M == 1 else 16, PDL=pdl_mode, TRIGGER=pdl_trigger, F32=interp,
                IEEE=weight.dtype == torch.float32)
    launch = {"launch_pdl": True} if pdl_mode else {}
    if config or interp or not switches.current().autotune:
        cfg = {"PREFETCH_X": 0, "W_AHEAD": 0, **(config or _FIXED)}
        grid = (triton.cdiv(N, cfg["BLOCK_N"]), cfg["SPLIT_K"])
        _gemv_kernel[grid](*args, **meta, **cfg, **launch)
    else:  # tuned once per shape and device (kernels.tuning); the tile space is every prologue's
        sw = switches.current()
        path = (meta["BLOCK_M"], str(weight.dtype).removeprefix("torch."), pdl_mode,
                int(sw.gemv_prefetch), int(sw.gemv_w_ahead), int(sw.cold_tune))
        tuning.launch("gemv", _gemv_kernel, _tuned,
                      lambda m: (triton.cdiv(N, m["BLOCK_N"]), m["SPLIT_K"]), args,
                      dict(meta, **launch), path, (meta["PROLOGUE"], int(has_res),
                                                   int(bias is not None), N, K),
                      x.device, _ALLOWED)
    y = y.view(*lead, N)
    return (y, h.view(*lead, K)) if has_res else y


def reference(x, weight, bias=None, prologue="none", norm_weight=None, eps=1e-5, residual=None):
    """PyTorch reference: the zoo's RMSNorm / SwiGLU numerics, then ``F.linear``."""
    h = None
    if prologue == "swiglu":
        g, u = x.chunk(2, dim=-1)
        x = torch.nn.functional.silu(g) * u
    elif prologue == "norm":
        h = x + residual if residual is not None else None
        hf = (h if h is not None else x).float()
        x = norm_weight * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    y = torch.nn.functional.linear(x, weight, bias)
    return (y, h) if h is not None else y
