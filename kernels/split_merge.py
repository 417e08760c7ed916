"""Split-K decode attention's plan and merge: how the context is split over programs, and how the
splits' partial outputs are merged by their log-sum-exp (flash-decoding, Dao et al. 2023).

``kernels.decode_attention``'s phase 1 writes, per (sequence, query head, split), a partial
output ``o [BLOCK_D]`` (normalized over the split: float32, or the activation dtype where
``kernels.decode_attention.PARTIALS_16``; the merge computes in float32 either way) and its
``lse`` (float32). The merge is
``out = sum_s o_s exp(lse_s - m) / sum_s exp(lse_s - m)``, ``m = max_s lse_s``. It runs either

- in a kernel of its own (``merge_kernel``, one program per (sequence, query head)), or
- inside phase 1's launch (``merge_group``): the last program of each (sequence, KV head) group
  to finish merges the group's ``G`` query heads, ``GC`` heads at a time, as one
  ``[GC, n_splits, D]`` tile. ``GC = 1`` (one head after the other) cost the MQA design of the
  main job (G = 32 heads on one program) 0.77 ms of a 1.97 ms decode step on the H100
  (``results/reference/fresh_h100.md``); a tile of several heads issues their loads together.

Bytes the merge reads: ``B * H * n_splits * (bytes(o) * BLOCK_D + 4)``, written by phase 1 just before
(L2-resident on an H100 / H200 for the shapes the zoo runs).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


def plan_splits(batch: int, n_kv_heads: int, capacity: int, block_n: int, n_sm: int,
                per_sm: int = 2) -> tuple[int, int]:
    """``(n_splits, split_len)``: enough programs for about ``per_sm`` per SM, each split a whole
    number of ``block_n`` tiles of the cache's ``capacity`` positions (static, so graph replays
    reuse it)."""
    want = max(1, math.ceil(per_sm * n_sm / (batch * n_kv_heads)))
    n_tiles = math.ceil(capacity / block_n)
    n_splits = min(want, n_tiles)
    split_len = math.ceil(n_tiles / n_splits) * block_n
    return math.ceil(capacity / split_len), split_len


# The merge is folded into the launch where it is small, ``G * next_pow2(n_splits) <= FOLD_MAX``;
# above, its own kernel (a launch more, but one program per query head, in parallel). Measured on
# the H100 (``bench.attention_probe``, ``results/reference/attention_h100.md``): folded, the
# Llama-3.2-1B and 3.1-8B batch-1 shapes (G x splits 4 x 8) took 6.8 / 7.9 us against 6.9 / 8.1
# with the kernel; the main job's MQA shape (32 x 64) 30.3 us against 11.0, G = 8 (8 x 32) 19.9
# against 18.9; batch 64 x 8k (4 x 2) 262-396 us either way.
FOLD_MAX = 64


def fold_pays(G: int, n_splits: int) -> bool:
    """Whether the merge runs inside the split kernel's launch (``FOLD_MAX``)."""
    return G * max(2, triton.next_power_of_2(n_splits)) <= FOLD_MAX


def group_chunk(G: int, n_splits: int, block_d: int, budget: int) -> int:
    """Query heads the in-kernel merge takes per tile: the largest power of two whose
    ``[GC, next_pow2(n_splits), block_d]`` float32 tile holds at most ``budget`` elements, at
    least 1, at most ``next_pow2(G)``."""
    per_head = max(2, triton.next_power_of_2(n_splits)) * block_d
    gc = 1
    while gc * 2 * per_head <= budget and gc * 2 <= triton.next_power_of_2(G):
        gc *= 2
    return gc


@triton.jit
def merge_group(o_ptr, lse_ptr, out_ptr, b, hkv, n_splits, n_heads, offs_d, dmask,
                G: tl.constexpr, GC: tl.constexpr, BLOCK_D: tl.constexpr, D: tl.constexpr,
                BLOCK_S: tl.constexpr):
    """Merge the splits of the ``G`` query heads of group ``(b, hkv)`` into ``out``, ``GC`` heads
    per ``[GC, BLOCK_S, BLOCK_D]`` tile (the partials read past L1: written by other programs)."""
    offs_s = tl.arange(0, BLOCK_S)
    smask = offs_s < n_splits
    for g0 in range(0, G, GC):
        offs_g = g0 + tl.arange(0, GC)
        gmask = offs_g < G
        bh = b * n_heads + hkv * G + offs_g
        rows = bh[:, None] * n_splits + offs_s[None, :]
        m2 = gmask[:, None] & smask[None, :]
        lse = tl.load(lse_ptr + rows, mask=m2, other=float("-inf"), cache_modifier=".cg")
        mx = tl.max(lse, axis=1)
        mx = tl.where(gmask, mx, 0.0)
        w = tl.where(m2, tl.exp(lse - mx[:, None]), 0.0)
        o = tl.load(o_ptr + rows[:, :, None] * BLOCK_D + offs_d[None, None, :],
                    mask=m2[:, :, None], other=0.0, cache_modifier=".cg").to(tl.float32)
        res = tl.sum(o * w[:, :, None], axis=1) / tl.where(gmask, tl.sum(w, axis=1), 1.0)[:, None]
        tl.store(out_ptr + bh[:, None] * D + offs_d[None, :],
                 res.to(out_ptr.dtype.element_ty), mask=gmask[:, None] & dmask[None, :])


@triton.jit
def merge_kernel(o_ptr, lse_ptr, out_ptr, n_splits, D: tl.constexpr, BLOCK_D: tl.constexpr,
                 BLOCK_S: tl.constexpr, PDL: tl.constexpr = False):
    """The merge as a kernel of its own: one program per (sequence, query head). With ``PDL``
    (launched with ``launch_pdl``) it is resident before phase 1 ends and waits for its memory
    (``gdc_wait``: the whole previous grid complete) before its first load."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    bh = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    smask = offs_s < n_splits
    lse = tl.load(lse_ptr + bh * n_splits + offs_s, mask=smask, other=float("-inf"))
    mx = tl.max(lse, axis=0)
    w = tl.where(smask, tl.exp(lse - mx), 0.0)
    o = tl.load(o_ptr + (bh * n_splits + offs_s)[:, None] * BLOCK_D + offs_d[None, :],
                mask=smask[:, None], other=0.0).to(tl.float32)
    res = tl.sum(o * w[:, None], axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + bh * D + offs_d, res.to(out_ptr.dtype.element_ty), mask=offs_d < D)


_COUNTERS: dict = {}
_OUTGROWN: list = []  # buffers replaced by larger ones: a captured graph may still point at them


def counters(device: torch.device, n: int, owner: str = "decode_attention") -> torch.Tensor:
    """A zeroed int32 buffer of at least ``n`` counters for ``owner`` (one buffer per kernel that
    counts its programs done: kernels whose launches overlap under PDL never share one),
    allocated once per device (before any graph capture: the capture's warm-up calls first) and
    left zeroed by every call."""
    buf = _COUNTERS.get((device, owner))
    if buf is None or buf.numel() < n:
        if buf is not None:
            _OUTGROWN.append(buf)
        buf = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
        _COUNTERS[(device, owner)] = buf
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # zeroed before any stream uses it
    return buf
