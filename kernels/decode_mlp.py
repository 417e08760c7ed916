"""The decode step's MLP block in one launch (a probe of issue 34's "fewer, fuller launches"):
RMSNorm with the residual add, the stacked gate|up GEMV, SwiGLU and the down GEMV, ``M <= 16``
rows, the two GEMVs joined inside one kernel by a grid-wide barrier.

Today the block is two launches of ``kernels.gemv`` (``w13`` with the ``norm`` prologue, ``w2``
with ``swiglu``). Between them DRAM idles: the first kernel's tail (its split-K finish), the
second's launch, and its first round trip to DRAM. Here one program per SM (all resident: the
barrier needs every program running) works through the first GEMV's ``(column tile, K split)``
items, then prefetches into L2 the weight slabs of its own second-GEMV items
(``prefetch.global.L2``, ``kernels.l2_prefetch``: they do not depend on the first GEMV), then
arrives at the barrier (an acq_rel counter) and waits for the others; the second GEMV then reads
its activations from L2 and much of its weights too. Split-K partial sums go to a float32
workspace, and a column tile's last program finishes it, as ``kernels.gemv`` does (the norm's
``rstd`` applied there). The last program to leave resets the barrier (a CUDA graph replays the
launch with the same counters).

The interpreter runs programs one by one, so a barrier would never open: there (and with
``phase`` 1 / 2) the phases are two launches of the same kernel. Numerics: ``kernels.gemv``'s
(the same roundings, float32 accumulation). Minimum DRAM traffic per call: ``3 F d bytes(W)``
plus the activations (``M (d + 2F + d)`` elements).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .l2_prefetch import _prefetch_l2

_FIXED = {"BN1": 64, "BK1": 128, "SK1": 1, "BN2": 64, "BK2": 128, "SK2": 2, "num_warps": 4,
          "num_stages": 3}


@triton.jit
def _item(item, x_ptr, r_ptr, nw_ptr, h_ptr, w_ptr, out_ptr, ws_ptr, ss_ptr, cnt_ptr,
          M, N, K, eps, PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr, BN: tl.constexpr,
          BK: tl.constexpr, SK: tl.constexpr, F32: tl.constexpr):
    # one (column tile, K split) item of y = prologue(x) @ W^T, W [N, K]; PROLOGUE 1: (x + r)
    # RMSNorm'd (x [M, K]), 2: silu(gate) * up of x = [M, 2K] (kernels.gemv's numerics)
    pid_n = item // SK
    pid_k = item % SK
    offs_m = tl.arange(0, 16)
    mmask = offs_m < M
    offs_n = pid_n * BN + tl.arange(0, BN)
    nmask = offs_n < N
    dt = w_ptr.dtype.element_ty
    acc = tl.zeros([BN, 16], tl.float32)
    ss = tl.zeros([16], tl.float32)
    k_len = tl.cdiv(tl.cdiv(K, SK), BK) * BK
    k_start = pid_k * k_len
    k_end = tl.minimum(k_start + k_len, K)
    xs = 2 * K if PROLOGUE == 2 else K
    for k0 in range(k_start, k_end, BK):
        offs_k = k0 + tl.arange(0, BK)
        kmask = offs_k < k_end
        xmask = mmask[:, None] & kmask[None, :]
        xp = x_ptr + offs_m[:, None] * xs + offs_k[None, :]
        if PROLOGUE == 2:  # written by other programs in this launch: past L1
            g = tl.load(xp, mask=xmask, other=0.0, cache_modifier=".cg").to(tl.float32)
            u = tl.load(xp + K, mask=xmask, other=0.0, cache_modifier=".cg").to(tl.float32)
            a = ((g * tl.sigmoid(g)).to(dt).to(tl.float32) * u).to(dt)
        else:
            a = tl.load(xp, mask=xmask, other=0.0)
            if HAS_RES:
                rp = r_ptr + offs_m[:, None] * K + offs_k[None, :]
                a = (a.to(tl.float32) + tl.load(rp, mask=xmask, other=0.0).to(tl.float32)).to(dt)
                first = (tl.zeros([16], tl.int32) + pid_n) == 0  # column tile 0 writes h
                tl.store(h_ptr + offs_m[:, None] * K + offs_k[None, :], a,
                         mask=xmask & first[:, None])
            hf = a.to(tl.float32)
            ss += tl.sum(hf * hf, axis=1)
            nw = tl.load(nw_ptr + offs_k, mask=kmask, other=0.0).to(tl.float32)
            a = (hf * nw[None, :]).to(dt)
        w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :],
                    mask=nmask[:, None] & kmask[None, :], other=0.0)
        if F32:  # the interpreter computes bf16 on raw bits: float32 math there
            acc = tl.dot(w.to(tl.float32), tl.trans(a.to(tl.float32)), acc)
        else:
            acc = tl.dot(w, tl.trans(a), acc)
    omask = nmask[:, None] & mmask[None, :]
    if SK > 1:  # partial sums into the workspace; the column tile's last program finishes it
        wsp = ws_ptr + offs_m[None, :] * N + offs_n[:, None]
        tl.atomic_add(wsp, acc, mask=omask, sem="relaxed")
        ssp = ss_ptr + pid_n * 16 + offs_m
        if PROLOGUE == 1:
            tl.atomic_add(ssp, ss, mask=mmask, sem="relaxed")
        tl.debug_barrier()
        if tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel") == SK - 1:
            tl.debug_barrier()
            acc = tl.load(wsp, mask=omask, other=0.0, cache_modifier=".cg")
            if PROLOGUE == 1:
                ss = tl.load(ssp, mask=mmask, other=0.0, cache_modifier=".cg")
            tl.debug_barrier()  # every thread has read before any zeroes (kernels.gemv)
            tl.store(wsp, tl.zeros([BN, 16], tl.float32), mask=omask)
            if PROLOGUE == 1:
                tl.store(ssp, tl.zeros([16], tl.float32), mask=mmask)
            tl.store(cnt_ptr + pid_n, 0)
            _finish(acc, ss, out_ptr, offs_m, offs_n, omask, N, K, eps, dt, PROLOGUE)
    else:
        _finish(acc, ss, out_ptr, offs_m, offs_n, omask, N, K, eps, dt, PROLOGUE)


@triton.jit
def _finish(acc, ss, out_ptr, offs_m, offs_n, omask, N, K, eps, dt, PROLOGUE: tl.constexpr):
    if PROLOGUE == 1:
        acc = acc * (1.0 / tl.sqrt(ss / K + eps))[None, :]
    tl.store(out_ptr + offs_m[None, :] * N + offs_n[:, None], acc.to(dt), mask=omask)


@triton.jit
def _prefetch_items(w_ptr, pid, nprog, N, K, BN: tl.constexpr, BK: tl.constexpr,
                    SK: tl.constexpr, LINE_ELEMS: tl.constexpr):
    # L2 prefetches of the weight slabs [BN, k_len] of this program's items of the second GEMV
    k_len = tl.cdiv(tl.cdiv(K, SK), BK) * BK
    per_row = tl.cdiv(k_len, LINE_ELEMS)
    lines = BN * per_row
    n_items = tl.cdiv(N, BN) * SK
    for item in range(pid, n_items, nprog):
        n0 = (item // SK) * BN
        k0 = (item % SK) * k_len
        for i in range(0, lines, 256):
            j = i + tl.arange(0, 256)
            row = tl.minimum(n0 + j // per_row, N - 1)
            col = tl.minimum(k0 + (j % per_row) * LINE_ELEMS, K - 1)
            _prefetch_l2(w_ptr + row.to(tl.int64) * K + col)


@triton.jit
def _mlp_kernel(x_ptr, r_ptr, nw_ptr, h_ptr, w13_ptr, w2_ptr, gu_ptr, y_ptr, ws1_ptr, ss_ptr,
                cnt1_ptr, ws2_ptr, cnt2_ptr, bar_ptr, M, D, F, eps,
                PHASE: tl.constexpr, HAS_RES: tl.constexpr, BN1: tl.constexpr,
                BK1: tl.constexpr, SK1: tl.constexpr, BN2: tl.constexpr, BK2: tl.constexpr,
                SK2: tl.constexpr, F32: tl.constexpr, PDL: tl.constexpr,
                PREFETCH: tl.constexpr, LINE_ELEMS: tl.constexpr):
    # PHASE 0: both GEMVs and the barrier between; 1: the first alone; 2: the second alone
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    if PDL:
        tl.extra.cuda.gdc_wait()
    if PHASE != 2:
        for item in range(pid, tl.cdiv(2 * F, BN1) * SK1, nprog):
            _item(item, x_ptr, r_ptr, nw_ptr, h_ptr, w13_ptr, gu_ptr, ws1_ptr, ss_ptr, cnt1_ptr,
                  M, 2 * F, D, eps, 1, HAS_RES, BN1, BK1, SK1, F32)
    if PHASE == 0:
        if PREFETCH:
            _prefetch_items(w2_ptr, pid, nprog, D, F, BN2, BK2, SK2, LINE_ELEMS)
        tl.debug_barrier()  # every thread's stores before the arrival (CUDA's grid-sync pattern)
        tl.atomic_add(bar_ptr, 1, sem="release")
        seen = tl.atomic_add(bar_ptr, 0, sem="acquire")
        while seen < nprog:
            seen = tl.atomic_add(bar_ptr, 0, sem="acquire")
        tl.debug_barrier()
    if PHASE != 1:
        for item in range(pid, tl.cdiv(D, BN2) * SK2, nprog):
            _item(item, gu_ptr, gu_ptr, gu_ptr, gu_ptr, w2_ptr, y_ptr, ws2_ptr, ss_ptr,
                  cnt2_ptr, M, D, F, eps, 2, False, BN2, BK2, SK2, F32)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if PHASE == 0:  # the last program out resets the barrier for the next launch
        tl.debug_barrier()
        if tl.atomic_add(bar_ptr + 1, 1, sem="acq_rel") == nprog - 1:
            tl.store(bar_ptr, 0)
            tl.store(bar_ptr + 1, 0)


_WORKSPACE: dict = {}


def _workspace(device: torch.device, D: int, F: int):
    """Zeroed float32 partial sums and sums of squares, int32 column-tile counters of both GEMVs
    and the barrier's two counters, once per (device, d, F), left zeroed by every call."""
    key = (device, D, F)
    if key not in _WORKSPACE:
        z = lambda n, dt=torch.float32: torch.zeros(n, device=device, dtype=dt)  # noqa: E731
        _WORKSPACE[key] = (z(16 * 2 * F), z(16 * (2 * F // 16 + 1)), z(2 * F // 16 + 1, torch.int32),
                           z(16 * D), z(D // 16 + 1, torch.int32), z(2, torch.int32))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return _WORKSPACE[key]


def _interpreted(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" or os.environ.get("TRITON_INTERPRET") == "1"


def decode_mlp(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
               w13: torch.Tensor, w2: torch.Tensor, eps: float, config: dict | None = None,
               pdl: bool = False, programs: int | None = None, prefetch: bool = True,
               phases: int = 0):
    """``y = w2 @ swiglu(w13 @ rmsnorm(x + residual))`` for ``M <= 16`` rows, one launch.

    Args:
        x, residual: ``[..., d]`` (residual may be None); norm_weight ``[d]``.
        w13: ``[2F, d]`` (gate rows then up rows); w2: ``[d, F]``; last dims contiguous.
        config: ``BN1, BK1, SK1`` (the first GEMV's tile width, K step and K splits), ``BN2,
            BK2, SK2`` (the second's), ``num_warps, num_stages``; default ``_FIXED``.
        pdl: programmatic dependent launch (``kernels.gemv``).
        programs: the grid (default the device's SMs, one program each; never more: the barrier
            needs every program resident).
        prefetch: L2-prefetch the second GEMV's weights before the barrier.
        phases: 0 one launch with the barrier (the GPU); 2: two launches (the interpreter's way).

    Returns:
        ``y [..., d]``, or ``(y, h)`` with ``h = x + residual`` when a residual is given.

    Raises:
        ValueError: more than 16 rows, or widths that do not match.
    """
    D = x.shape[-1]
    F = w2.shape[1]
    if w13.shape != (2 * F, D) or w2.shape != (D, F) or norm_weight.shape != (D,):
        raise ValueError(f"decode_mlp: w13 {tuple(w13.shape)}, w2 {tuple(w2.shape)}, norm "
                         f"{tuple(norm_weight.shape)} do not fit d={D}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, D).contiguous()
    M = x2.shape[0]
    if M > 16:
        raise ValueError(f"decode_mlp takes at most 16 rows, got {M}")
    r2 = residual.reshape(-1, D).contiguous() if residual is not None else x2
    h = torch.empty_like(x2) if residual is not None else x2
    gu = torch.empty(M, 2 * F, device=x.device, dtype=w13.dtype)
    y = torch.empty(M, D, device=x.device, dtype=w2.dtype)
    ws1, ss, cnt1, ws2, cnt2, bar = _workspace(x.device, D, F)
    cfg = dict(_FIXED, **(config or {}))
    tiles = {k: cfg[k] for k in ("BN1", "BK1", "SK1", "BN2", "BK2", "SK2")}
    interp = _interpreted(x)
    if interp:
        phases = 2
    n_sm = (torch.cuda.get_device_properties(x.device).multi_processor_count
            if x.device.type == "cuda" else 4)
    items = max(triton.cdiv(2 * F, cfg["BN1"]) * cfg["SK1"], triton.cdiv(D, cfg["BN2"]) * cfg["SK2"])
    grid = (min(programs or n_sm, n_sm, items),)
    args = (x2, r2, norm_weight, h, w13, w2, gu, y, ws1, ss, cnt1, ws2, cnt2, bar, M, D, F, eps)
    meta = dict(HAS_RES=residual is not None, F32=interp, LINE_ELEMS=128 // w2.element_size(),
                num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **tiles)
    pdl = pdl and not interp
    if phases == 0:
        _mlp_kernel[grid](*args, PHASE=0, PDL=pdl, PREFETCH=prefetch, **meta,
                          **({"launch_pdl": True} if pdl else {}))
    else:
        for phase in (1, 2):
            _mlp_kernel[grid](*args, PHASE=phase, PDL=False, PREFETCH=False, **meta)
    y = y.view(*lead, D)
    return (y, h.view(*lead, D)) if residual is not None else y


def reference(x, residual, norm_weight, w13, w2, eps):
    """PyTorch reference: ``kernels.gemv.reference``'s norm prologue, then its SwiGLU one."""
    from .gemv import reference as gemv_ref

    out = gemv_ref(x, w13, None, "norm", norm_weight, eps, residual)
    gu, h = out if residual is not None else (out, None)
    y = gemv_ref(gu, w2, None, "swiglu")
    return (y, h) if residual is not None else y
