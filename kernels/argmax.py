"""Greedy sampling: the index of each row's largest logit, split over the vocabulary.

A decode step ends with ``logits [M, V]`` (M sequences, V up to 256k) and takes each row's
argmax. ``torch.argmax`` reduces a row of Llama-3's 128256 logits in ~28 us on an H100 (the
``sample`` calibration entries, clone and argmax inside a CUDA graph: 30 us at one row, 31 at
eight, 37 at 64), 2-3% of a small model's decode step, for a read of 0.25-2 MB that the L2 still
holds from the LM head. Here one program per (row, chunk of ``BLOCK`` logits) finds its chunk's
largest value and first index, writes the pair, counts itself done on a per-row counter (an
acq_rel atomic, the pattern of ``kernels.split_merge``), and the row's last program reduces the
row's pairs and resets the counter for the next call (also inside a CUDA graph replay): one
launch, no host synchronization.

Ties go to the first index and a NaN counts as the largest (its first index wins), as
``torch.argmax`` has them: every answer is a column of the row. (A trial refuses non-finite
logits before it reports a figure.)

Bytes read: ``M * V * bytes(logits)`` (plus ``M * n_chunks * 8`` of pairs, L2-resident).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .split_merge import counters

BLOCK = 4096  # logits per program: one 8 KB (bf16) load, 32 programs per Llama-3 row
MAX_INDEX = 2**31 - 1


@triton.jit
def _argmax_kernel(x_ptr, vals_ptr, idx_ptr, cnt_ptr, out_ptr, V, s_xm,
                   BLOCK: tl.constexpr, N_CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr,
                   MAX_INDEX: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    valid = offs < V
    x = tl.load(x_ptr + row * s_xm + offs, mask=valid, other=float("-inf")).to(tl.float32)
    nan = x != x  # a NaN is the largest, as torch.argmax has it: the chunk's first NaN wins
    xv = tl.where(nan, float("-inf"), x)
    m = tl.max(xv, axis=0)
    first = tl.min(tl.where((xv == m) & valid, offs, MAX_INDEX), axis=0)
    first_nan = tl.min(tl.where(nan & valid, offs, MAX_INDEX), axis=0)
    has_nan = first_nan < MAX_INDEX
    tl.store(vals_ptr + row * N_CHUNKS + chunk, tl.where(has_nan, float("-inf"), m))
    tl.store(idx_ptr + row * N_CHUNKS + chunk, tl.where(has_nan, -first_nan - 1, first))
    cnt = cnt_ptr + row
    tl.debug_barrier()  # the pair stored before the count (CUDA's grid-sync pattern)
    if tl.atomic_add(cnt, 1, sem="acq_rel") == N_CHUNKS - 1:
        tl.store(cnt, 0)
        c = tl.arange(0, BLOCK_C)
        cm = c < N_CHUNKS
        vals = tl.load(vals_ptr + row * N_CHUNKS + c, mask=cm, other=float("-inf"),
                       cache_modifier=".cg")
        idx = tl.load(idx_ptr + row * N_CHUNKS + c, mask=cm, other=MAX_INDEX,
                      cache_modifier=".cg")
        first_nan = tl.min(tl.where(idx < 0, -idx - 1, MAX_INDEX), axis=0)  # NaN chunks: -i - 1
        best = tl.max(vals, axis=0)
        first = tl.min(tl.where((vals == best) & (idx >= 0), idx, MAX_INDEX), axis=0)
        tl.store(out_ptr + row, tl.where(first_nan < MAX_INDEX, first_nan, first).to(tl.int64))


def argmax(logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's index of its largest value: ``logits [M, V]`` (unit stride along V; bf16, fp16
    or float32) -> ``[M, 1]`` int64, as ``logits.argmax(-1, keepdim=True)`` (ties: the first
    index); written into ``out`` (``[M, 1]`` int64, contiguous) when given.

    Raises:
        ValueError: ``logits`` not 2-D, of no rows or columns, not floating point, or not of unit
            stride along its last dimension; ``out`` of another shape or dtype.
    """
    if (logits.dim() != 2 or 0 in logits.shape or logits.stride(1) != 1
            or not logits.dtype.is_floating_point):
        raise ValueError(f"argmax takes floating-point logits [M, V] (M, V > 0) of unit stride "
                         f"along V, got {logits.dtype} of shape {list(logits.shape)}, strides "
                         f"{list(logits.stride())}")
    M, V = logits.shape
    n_chunks = triton.cdiv(V, BLOCK)
    vals = torch.empty(M, n_chunks, device=logits.device, dtype=torch.float32)
    idx = torch.empty(M, n_chunks, device=logits.device, dtype=torch.int32)
    if out is None:
        out = torch.empty(M, 1, device=logits.device, dtype=torch.int64)
    elif out.shape != (M, 1) or out.dtype != torch.int64 or not out.is_contiguous():
        raise ValueError(f"argmax's out must be a contiguous [M, 1] = {[M, 1]} int64 tensor, got "
                         f"{list(out.shape)} {out.dtype}")
    cnt = counters(logits.device, M, owner="argmax")
    _argmax_kernel[(M, n_chunks)](logits, vals, idx, cnt, out, V, logits.stride(0), BLOCK=BLOCK,
                                  N_CHUNKS=n_chunks,
                                  BLOCK_C=max(2, triton.next_power_of_2(n_chunks)),
                                  MAX_INDEX=MAX_INDEX, num_warps=4)
    return out


def reference(logits: torch.Tensor) -> torch.Tensor:
    """``logits [M, V]`` -> ``[M, 1]`` int64: ``torch.argmax`` (ties: the first index)."""
    return logits.argmax(-1, keepdim=True)
