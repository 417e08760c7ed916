"""A GEMV per attention head for a decode step of few rows: ``y[b, h] = x[b, h] @ W[h]``.

Latent attention's absorbed decode (``zoo.mla_attention.MLAttention.decode``) multiplies each
head's few query rows by its own slice of ``wkv_b`` twice: ``q_nope W_UK`` (``[B, H, nope]`` by
``[H, nope, r]``) before the attention over the latents and ``o_lat W_UV^T`` (``[B, H, r]`` by
``[H, r, v]``, ``W_UV`` stored ``[H, v, r]``) after it. Each reads ``H * nope * r`` weights once
for a handful of FLOPs a byte: a batched GEMV, bandwidth-bound. cuBLAS's batched GEMM takes 2.8
and 3.2 us for them at one row, 16 heads and ``r = 512`` on the H100 in a CUDA graph (about 5
under ncu; 2 MB each: 0.7 us at the copy bandwidth; ``results/reference/mla_model_h100.md``).
The performance model prices each call as the decode GEMV of its shape (``zoo.attn``).

One program owns one head's ``BLOCK_N`` output channels for ``BLOCK_B`` rows and streams its
``[K, BLOCK_N]`` weight slice in ``[BLOCK_K, BLOCK_N]`` tiles, accumulating in float32: for one
row on the CUDA cores, for 2-16 rows (padded to 16) through ``tl.dot``. The weight is read
through its strides, so ``W_UK`` (``n`` contiguous) and ``W_UV^T`` (``k`` contiguous) are both
views of ``wkv_b``'s weight, nothing copied; ``x`` and ``y`` are ``[B, H, *]`` by their strides,
so the output is written where ``wo`` reads it (no gather of ``[H, B, v]`` into ``[B, H v]``).
Under ``pdl`` each program waits for the previous kernel's writes before its first load and lets
the next kernel launch once its loop is done (``kernels.gemv``).

Minimum DRAM traffic: ``H * K * N * bytes(W)`` plus the activations ``B * H * (K + N)``.
``reference`` is the PyTorch reference (``tests/kernels/test_head_gemv.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_attention import _interpreted, _n_sm

MAX_B = 16  # rows a program takes (tl.dot's smallest M); more rows: a third grid axis
MANY_HEADS = 64  # from this many heads one row is cuBLAS's (per_head_gemv)


def per_head_gemv(B: int, H: int) -> bool:
    """Whether latent attention's decode runs its absorbed products through ``head_gemv`` (else
    cuBLAS's batched GEMM): up to ``MAX_B`` sequences, but not one sequence of ``MANY_HEADS`` or
    more heads. On the H100 (``bench.head_gemv_probe``; ``results/reference/mla_model_h100.md``),
    16 heads: 2.8 / 2.3 us against cuBLAS's 2.8 / 3.2 at batch 1, 2.3 / 2.9 against 2.7 / 3.2
    at batch 8, 4.2 / 4.5 against 3.1 / 3.2 at 64; 128 heads: 8.6 / 5.9 against 4.9 / 4.4 at
    batch 1, even at batch 8 (cuBLAS's output then needs a gather for ``wo``)."""
    return B <= MAX_B and (B > 1 or H < MANY_HEADS)


@triton.jit
def _head_gemv_kernel(x_ptr, w_ptr, y_ptr, B, N, K, s_xb, s_xh, s_wh, s_wk, s_wn, s_yb, s_yh,
                      BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      UPCAST: tl.constexpr, PREC: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # programmatic dependent launch: wait for the previous kernel's writes first
        tl.extra.cuda.gdc_wait()
    h = tl.program_id(0).to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.program_id(2) * BLOCK_B + tl.arange(0, BLOCK_B)
    nmask = offs_n < N
    bmask = offs_b < B
    w_base = w_ptr + h * s_wh + offs_n[None, :] * s_wn
    x_base = x_ptr + h * s_xh + offs_b[:, None] * s_xb
    acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        kmask = offs_k < K
        w = tl.load(w_base + offs_k[:, None] * s_wk, mask=kmask[:, None] & nmask[None, :],
                    other=0.0)  # [BLOCK_K, BLOCK_N]
        x = tl.load(x_base + offs_k[None, :], mask=bmask[:, None] & kmask[None, :],
                    other=0.0)  # [BLOCK_B, BLOCK_K]
        if BLOCK_B == 1:  # one row: the products summed on the CUDA cores
            acc += tl.sum(x.to(tl.float32).reshape(BLOCK_K, 1) * w.to(tl.float32),
                          0).reshape(1, BLOCK_N)
        elif UPCAST:  # the interpreter's 16-bit tl.dot is wrong (triton 3.9): float32 there
            acc = tl.dot(x.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(x.to(w.dtype), w, acc, input_precision=PREC)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    y = y_ptr + h * s_yh + offs_b[:, None] * s_yb + offs_n[None, :]
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=bmask[:, None] & nmask[None, :])


def tiles(H: int, N: int, K: int, rows: int, n_sm: int, transposed: bool = False) -> tuple:
    """``(BLOCK_N, BLOCK_K, warps, stages)``. One row: the fastest of 14 on the H100 at 16 heads
    and DeepSeek's widths (``bench.head_gemv_probe``; ``results/reference/mla_model_h100.md``):
    ``W_UV^T`` (``K`` contiguous) whole rows of ``K`` (to 512) eight at a time, one stage (2.26
    us against cuBLAS's 3.17); ``W_UK`` (``N`` contiguous) ``(64, 128, 8, 2)`` (2.85 against
    2.89). 2-16 rows: the widest ``BLOCK_N`` (128 down to 16) that still gives every SM a
    program (``H * ceil(N / BLOCK_N) >= n_sm``), ``K`` in tiles of 64 (2.38 / 2.86 us against
    cuBLAS's 2.76 / 3.13 at batch 8)."""
    if rows == 1 and transposed:
        return 8, min(512, max(16, triton.next_power_of_2(K))), 4, 1
    if rows == 1:
        return 64, min(128, max(16, triton.next_power_of_2(K))), 8, 2
    bn = 128
    while bn > 16 and H * triton.cdiv(N, bn) < n_sm:
        bn //= 2
    return bn, min(64, max(16, triton.next_power_of_2(K))), 4, 3


def head_gemv(x: torch.Tensor, w: torch.Tensor, transposed: bool = False,
              out: torch.Tensor | None = None, pdl: bool = False,
              tile: tuple | None = None) -> torch.Tensor:
    """Each head's rows times its own weight.

    Args:
        x: ``[B, H, K]`` activations (last dim contiguous; any strides over ``B`` and ``H``).
        w: ``[H, K, N]`` per-head weights, or with ``transposed`` ``[H, N, K]`` (the product is
            then ``x[b, h] @ w[h]^T``); any strides (a view of a stacked weight is read in place).
        out: ``[B, H, N]`` to write into (last dim contiguous), else a new tensor in ``x``'s
            dtype.
        pdl: launch with programmatic dependent launch (Hopper, a Triton with ``launch_pdl``;
            ``kernels.gemv``). Off in the interpreter.
        tile: ``tiles``' tuple to use instead of its choice (benchmarks).

    Returns:
        ``y [B, H, N]``, ``y[b, h] = x[b, h] @ W[h]``, accumulated in float32 and rounded once.

    Raises:
        ValueError: shapes that do not agree, or a last dim of ``x`` / ``out`` not contiguous.
    """
    B, H, K = x.shape
    if transposed:
        Hw, N, Kw = w.shape
        s_wh, s_wn, s_wk = w.stride()
    else:
        Hw, Kw, N = w.shape
        s_wh, s_wk, s_wn = w.stride()
    if (Hw, Kw) != (H, K):
        raise ValueError(f"head_gemv: x {list(x.shape)} and w {list(w.shape)} "
                         f"(transposed={transposed}) do not agree")
    if out is None:
        out = torch.empty(B, H, N, device=x.device, dtype=x.dtype)
    if out.shape != (B, H, N) or out.stride(2) != 1 or x.stride(2) != 1:
        raise ValueError(f"head_gemv: out {list(out.shape)} must be [{B}, {H}, {N}] and the "
                         "last dims of x and out contiguous")
    rows = 1 if B == 1 else MAX_B
    bn, bk, warps, stages = tile or tiles(H, N, K, rows, _n_sm(x.device), transposed)
    interp = _interpreted(x)
    pdl = pdl and not interp
    _head_gemv_kernel[(H, triton.cdiv(N, bn), triton.cdiv(B, rows))](
        x, w, out, B, N, K, x.stride(0), x.stride(1), s_wh, s_wk, s_wn,
        out.stride(0), out.stride(1), BLOCK_B=rows, BLOCK_N=bn, BLOCK_K=bk,
        UPCAST=interp, PREC="ieee" if w.dtype == torch.float32 else "tf32", PDL=pdl,
        num_warps=warps, num_stages=stages, **({"launch_pdl": True} if pdl else {}))
    return out


def reference(x: torch.Tensor, w: torch.Tensor, transposed: bool = False) -> torch.Tensor:
    """``head_gemv`` in PyTorch, float32: ``[B, H, K]`` x ``[H, K, N]`` (or ``[H, N, K]``
    transposed) -> ``[B, H, N]``."""
    w = w.float().transpose(1, 2) if transposed else w.float()
    return torch.einsum("bhk,hkn->bhn", x.float(), w)


def launches() -> int:
    """Kernel launches of one call."""
    return 1
