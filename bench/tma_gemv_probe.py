"""The decode GEMV with its weight tiles read by the Tensor Memory Accelerator (issue 34's lever).

    python -m bench.tma_gemv_probe OUT          # OUT/tma_gemv.csv

The hypothesis: the dot-path GEMV (``kernels.gemv``, 2-16 rows) reads its weight tiles with
``tl.load`` (each thread computes addresses, 16-byte ``cp.async`` copies), and under ncu the
main job's batch-8 projections stream at 28-59% of peak DRAM with one program per SM
(``results/reference/decode_ncu_h100.md``): the bytes in flight are what the warps' load
instructions keep issued. On Hopper a TMA copy moves a whole ``[BLOCK_N, BLOCK_K]`` tile per
instruction (one thread issues it; an mbarrier says when it landed), so a program can keep more
stages in flight with the same warps and registers. Untried in this project until now.

``_tma_gemv_kernel`` is ``kernels.gemv``'s dot path (same prologues through its ``_act_load`` /
``_epilogue``, same split-K workspace, same PDL wait through ``_gdc_wait_dep``) with one change:
the weight tile comes from a host-side ``TensorDescriptor`` (``desc.load``), pipelined by the
compiler over ``num_stages``. Each decode projection of the main job's MQA design, of
Llama-3.2-1B and of Llama-3.1-8B, at 1 and 8 rows, runs the shipped tile (``kernels.gemv.gemv``,
tuned on first use as the step does) and a grid of TMA tiles, each timed two ways:
- ``chain``: ``n`` copies of the layer's weight (``n x bytes >= 2.5x`` the L2) called back to back
  in one CUDA graph under PDL, as a decode step meets its layers; us per call;
- ``cold``: ``kernels.graph_timing.time_ms(cold=True)`` (the calibration's way).
Outputs are checked against the shipped kernel's. Nothing shipped changes; a win is for
``kernels.gemv`` (then its choices and calibration measured again).
"""

from __future__ import annotations

import functools
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels.gemv import PROLOGUES, _act_load, _epilogue, _gdc_wait_dep, _workspace, gemv


@triton.jit
def _tma_gemv_kernel(x_ptr, r_ptr, nw_ptr, h_ptr, w_desc, y_ptr, ws_ptr, ss_ptr, cnt_ptr,
                     M, N, K, eps, s_xm, s_rm, s_hm, s_ym,
                     PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                     PDL: tl.constexpr, F32: tl.constexpr):
    # kernels.gemv._gemv_kernel's dot path (acc [BLOCK_N, BLOCK_M] = W_tile @ a^T), the weight
    # tile read through w_desc ([N, K], block [BLOCK_N, BLOCK_K]; out of bounds reads as zero)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = offs_m < M
    nmask = offs_n < N
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    ss = tl.zeros([BLOCK_M], tl.float32)
    dt = y_ptr.dtype.element_ty
    k_len = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_start = pid_k * k_len
    k_end = tl.minimum(k_start + k_len, K)
    first = (tl.zeros([BLOCK_M], tl.int32) + pid_n) == 0
    if PDL:
        dep = _gdc_wait_dep(pid_n) * 16
        x_ptr += dep
        r_ptr += dep
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        p0, p1, nw = _act_load(x_ptr, r_ptr, nw_ptr, offs_m, offs_k, mmask, k_end, K, s_xm, s_rm,
                               PROLOGUE, HAS_RES)
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
        w = w_desc.load([pid_n * BLOCK_N, k0])
        if F32:
            acc = tl.dot(w.to(tl.float32), tl.trans(a.to(tl.float32)), acc)
        else:
            acc = tl.dot(w, tl.trans(a), acc)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    omask = nmask[:, None] & mmask[None, :]
    if SPLIT_K > 1:  # kernels.gemv's split-K tail: partials, the column's last program ends it
        wsp = ws_ptr + offs_m[None, :] * N + offs_n[:, None]
        tl.atomic_add(wsp, acc, mask=omask, sem="relaxed")
        if PROLOGUE == 1:
            tl.atomic_add(ss_ptr + pid_n * BLOCK_M + offs_m, ss, mask=mmask, sem="relaxed")
        tl.debug_barrier()
        if tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel") == SPLIT_K - 1:
            tl.debug_barrier()
            acc = tl.load(wsp, mask=omask, other=0.0, cache_modifier=".cg")
            ssp = ss_ptr + pid_n * BLOCK_M + offs_m
            if PROLOGUE == 1:
                ss = tl.load(ssp, mask=mmask, other=0.0, cache_modifier=".cg")
            tl.debug_barrier()
            tl.store(wsp, tl.zeros([BLOCK_N, BLOCK_M], tl.float32), mask=omask)
            if PROLOGUE == 1:
                tl.store(ssp, tl.zeros([BLOCK_M], tl.float32), mask=mmask)
            tl.store(cnt_ptr + pid_n, 0)
            _epilogue(acc, ss, y_ptr, y_ptr, offs_m, offs_n, omask, nmask, s_ym, K, eps, dt,
                      PROLOGUE, False)
    else:
        _epilogue(acc, ss, y_ptr, y_ptr, offs_m, offs_n, omask, nmask, s_ym, K, eps, dt,
                  PROLOGUE, False)


def tma_gemv(x: torch.Tensor, weight: torch.Tensor, prologue: str = "none",
             norm_weight: torch.Tensor | None = None, eps: float = 1e-5,
             residual: torch.Tensor | None = None, tile: tuple = (128, 128, 4, 4, 4),
             pdl: bool = False):
    """``kernels.gemv.gemv``'s contract (no bias) through ``_tma_gemv_kernel``.

    x ``[M, K]`` (``[M, 2K]`` for ``swiglu``), ``M <= 16``; weight ``[N, K]`` contiguous;
    ``tile = (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages)``. Returns ``y [M, N]`` (and
    ``h [M, K]`` with ``norm`` and a residual). Raises ValueError on an unknown prologue."""
    if prologue not in PROLOGUES:
        raise ValueError(f"prologue must be one of {PROLOGUES}, got {prologue!r}")
    bn, bk, sk, warps, stages = tile
    N, K = weight.shape
    M = x.shape[0]
    y = torch.empty(M, N, device=x.device, dtype=weight.dtype)
    has_res = prologue == "norm" and residual is not None
    r = residual if has_res else x
    h = torch.empty_like(r) if has_res else y
    interp = x.device.type == "cpu"
    ws, ssw, cnt = _workspace(x.device, M, N)
    desc = TensorDescriptor.from_tensor(weight, [bn, bk])
    pdl = pdl and not interp
    _tma_gemv_kernel[(triton.cdiv(N, bn), sk)](
        x, r, norm_weight if norm_weight is not None else weight, h, desc, y, ws, ssw, cnt,
        M, N, K, eps, x.stride(0), r.stride(0), h.stride(0), y.stride(0),
        PROLOGUE=PROLOGUES.index(prologue), HAS_RES=has_res, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk,
        SPLIT_K=sk, PDL=pdl, F32=interp, num_warps=warps, num_stages=stages,
        **({"launch_pdl": True} if pdl else {}))
    return (y, h) if has_res else y


SHAPES = [  # name, N, K, prologue: each at 1 and 8 rows
    ("mqa_qkv", 2176, 2048, "norm+res"), ("1b_qkv", 3072, 2048, "norm+res"),
    ("1b_out", 2048, 2048, "none"), ("1b_w13", 16384, 2048, "norm+res"),
    ("1b_w2", 2048, 8192, "swiglu"), ("8b_qkv", 6144, 4096, "norm+res"),
    ("8b_out", 4096, 4096, "none"), ("8b_w13", 28672, 4096, "norm+res"),
    ("8b_w2", 4096, 14336, "swiglu"),
]
TILES = [  # BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages
    (128, 64, 1, 4, 6), (128, 64, 4, 4, 6), (128, 64, 8, 4, 6), (128, 128, 1, 4, 4),
    (128, 128, 4, 4, 4), (128, 128, 8, 4, 4), (128, 128, 4, 8, 5), (64, 128, 4, 4, 6),
    (64, 128, 8, 4, 6), (64, 256, 4, 4, 4), (128, 256, 4, 8, 3), (256, 64, 4, 8, 4),
]


def _inputs(M: int, N: int, K: int, pro: str, copies: int):
    dev, dt = torch.device("cuda"), torch.bfloat16
    base = pro.split("+")[0]
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, 2 * K if base == "swiglu" else K, device=dev, dtype=dt, generator=g)
    ws = [torch.randn(N, K, device=dev, dtype=dt, generator=g) / K**0.5 for _ in range(copies)]
    nw = torch.ones(K, device=dev, dtype=dt) if base == "norm" else None
    res = torch.randn(M, K, device=dev, dtype=dt, generator=g) if pro.endswith("+res") else None
    return x, ws, base, nw, res


def _chain_us(calls, n: int) -> float:
    from kernels.graph_timing import _replay_ms
    return _replay_ms(calls, 3) / n * 1e3


def _row(name: str, M: int, N: int, K: int, pro: str, copies: int) -> dict:
    """One shape's row: the shipped kernel and every TMA tile, us per call (chained, cold)."""
    from kernels.graph_timing import time_ms
    x, ws, base, nw, res = _inputs(M, N, K, pro, copies)

    def shipped(w):
        y = gemv(x, w, None, base, nw, 1e-5, res)
        return y[0] if isinstance(y, tuple) else y

    def tma(w, tile):
        y = tma_gemv(x, w, base, nw, 1e-5, res, tile, pdl=True)
        return y[0] if isinstance(y, tuple) else y

    ref = shipped(ws[0]).float()
    row = {"shape": name, "M": M, "N": N, "K": K, "prologue": pro, "copies": copies,
           "weight_MB": round(N * K * 2 / 1e6, 2),
           "ideal_us_at_3TBps": round(N * K * 2 / 3.0e12 * 1e6, 2),
           "shipped_chain_us": round(_chain_us([functools.partial(shipped, w) for w in ws],
                                               copies), 2),
           "shipped_cold_us": round(time_ms(functools.partial(shipped, ws[0]), cold=True) * 1e3,
                                    2)}
    best = ("shipped", row["shipped_chain_us"])
    for tile in TILES:
        tag = "n{}_k{}_s{}_w{}_st{}".format(*tile)
        try:
            diff = float((tma(ws[0], tile).float() - ref).abs().max())
            if diff > 0.02 * float(ref.abs().max()) + 1e-2:
                row[tag] = f"wrong {diff:.3g}"
                continue
            t = round(_chain_us([functools.partial(tma, w, tile) for w in ws], copies), 2)
            row[tag] = t
            row[tag + "_cold"] = round(time_ms(functools.partial(tma, ws[0], tile), cold=True)
                                       * 1e3, 2)
            if t < best[1]:
                best = (tag, t)
        except Exception as e:  # a tile that does not fit (shared memory, TMA box)
            row[tag] = f"{type(e).__name__}: {str(e)[:80]}"
    row["best"], row["best_chain_us"] = best
    row["tma_gain_pct"] = round(100 * (1 - best[1] / row["shipped_chain_us"]), 1)
    return row


def main(out: str) -> None:
    """Every shape of ``SHAPES`` at 1 and 8 rows into ``out/tma_gemv.csv`` (printed as it goes)."""
    from pathlib import Path

    from bench.gpu import write_rows
    Path(out).mkdir(parents=True, exist_ok=True)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for name, N, K, pro in SHAPES:
        copies = max(2, -(-int(2.5 * l2) // (N * K * 2)))
        for M in (1, 8):
            rows.append(_row(name, M, N, K, pro, copies))
            print({k: v for k, v in rows[-1].items() if not k.endswith("_cold")}, flush=True)
            write_rows(f"{out}/tma_gemv.csv", rows)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")
