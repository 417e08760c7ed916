"""GQA decode attention: one query token per sequence against the KV cache, split over the context.

Phase 1, one program per (sequence, KV head, split): load the ``G = n_heads / n_kv_heads`` query
heads that share the KV head as the rows of one tile (padded to 16 for ``tl.dot``), stream the
split's K and V tiles once, and keep an online softmax (Milakov & Gimelshein 2018,
arXiv:1805.02867; FlashAttention, Dao et al. 2022). Each KV byte is read once for the whole group.
Phase 2 merges the splits' partial outputs by their log-sum-exp (split-K "flash-decoding", Dao et
al. 2023; ``kernels.split_merge``): where the merge is small (``G * splits <= 64``) inside phase
1's launch (each program counts itself done on a per-(sequence, KV head) acq_rel atomic counter;
the last merges the group's splits, several query heads per tile, and resets the counter, also
inside a CUDA graph replay); otherwise in a kernel of its own, one program per (sequence, query
head) (MQA at batch 8: 47 us a layer folded one head at a time, 11 us so; H100,
``results/reference/attention_h100.md``).

With ``new_kv`` the step's RoPE and cache write are folded in: each program rotates its group's
query rows in registers, and the one whose split holds the new position first rotates the token's
k and writes k and v into the cache (quantized on the way, with ``kernels.rope``'s helpers and
numerics), by default (``switches.rope_in_attention``; H100, batch 1, prompt 512: Llama-3.2-1B
865 -> 883 tok/s, Llama-3.1-8B 179.1 -> 180.9, `bench_h100_v3_dev/`).

The cache may be bf16/fp16, or int8 / fp8 e4m3 with one float32 scale per (sequence, KV head,
position); quantized tiles are converted in registers (int8 to q's dtype; fp8 to fp16 with q in
fp16, one instruction a pair on Hopper: 1.33x -> 1.53x the bf16 cache's tok/s; int8 so measured
slower), the scales applied to the scores (K) and the probabilities (V; fp8 times ``PV_SCALE`` to
stay in fp16's range). The attended length is read from a device tensor (``input_pos``), so one
launch serves every step of a captured CUDA graph; splits past it exit at once.

Minimum DRAM traffic per call: ``2 * B * Hkv * kv_len * (D * bytes(kv) + scale bytes)`` plus q and
the output (small).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import switches, tuning
from .graph_timing import graph_bench
from .rope import QMAX, _rotated, _store_kv
from .split_merge import counters, fold_pays, group_chunk, merge_group, merge_kernel, plan_splits

PV_SCALE = 1024.0  # quantized V: p * v_scale * PV_SCALE in fp16 (|V| up to 8128
# for int8, 28672 for fp8 stays finite; a term under 6e-5 / PV_SCALE is below fp16's normal range)


@triton.jit
def _split_kernel(q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, pos_ptr, o_ptr, lse_ptr, cnt_ptr, out_ptr,
                  kn_ptr, vn_ptr, cos_ptr, sin_ptr, kr_ptr, sink_ptr,
                  s_qb, s_qh, s_kb, s_kh, s_ks, s_vb, s_vh, s_vs, s_sb, s_sh, s_nb, s_nh,
                  sm_scale, split_len, n_splits, n_heads, n_kv_heads, capacity,
                  G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, QUANT: tl.constexpr,
                  F32: tl.constexpr, MERGE: tl.constexpr, BLOCK_S: tl.constexpr,
                  PDL: tl.constexpr, PV_SCALE: tl.constexpr, OPS16: tl.constexpr,
                  ROPE: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                  QMAX_: tl.constexpr, MERGE_GC: tl.constexpr, SINK: tl.constexpr):
    if PDL:  # see kernels.gemv: wait first, let the next kernel launch after the main loop
        tl.extra.cuda.gdc_wait()
    b = tl.program_id(0).to(tl.int64)
    hkv = tl.program_id(1)
    split = tl.program_id(2)
    kv_len = tl.load(pos_ptr).to(tl.int32) + 1
    slot = (kv_len - 1) % capacity  # a ring of a local layer's window: its slot; else the position
    start = split * split_len
    end = tl.minimum(start + split_len, tl.minimum(kv_len, capacity))
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    gmask = offs_g < G
    dmask = offs_d < D
    heads = hkv * G + offs_g
    qm = gmask[:, None] & dmask[None, :]
    q = tl.load(q_ptr + b * s_qb + heads[:, None] * s_qh + offs_d[None, :], mask=qm, other=0.0)
    if ROPE:  # q rotated here; the new token's k and v go into the cache first
        q = _rope_q(q, q_ptr + b * s_qb + heads[:, None] * s_qh, qm, cos_ptr, sin_ptr, kv_len - 1,
                    offs_d, dmask, HALF)
        if (slot >= start) & (slot < start + split_len):  # this split holds it
            _write_new_kv(kn_ptr + b * s_nb + hkv * s_nh, vn_ptr + b * s_nb + hkv * s_nh,
                          kr_ptr + (b * n_kv_heads + hkv) * 2 * HALF,
                          cos_ptr, sin_ptr, kv_len - 1, slot, k_ptr + b * s_kb + hkv * s_kh,
                          v_ptr + b * s_vb + hkv * s_vh, s_ks, ks_ptr + b * s_sb + hkv * s_sh,
                          vs_ptr + b * s_sb + hkv * s_sh, QUANT, QMAX_, HALF, BLOCK_HALF)
        tl.debug_barrier()  # the cache writes before any thread's loads of the position
    if F32:  # the interpreter computes bf16 on raw bits: float32 math there
        q = q.to(tl.float32)
    elif OPS16:  # fp8 converts to fp16 in one instruction (to bf16 in three): the dots run in
        q = q.to(tl.float16)  # fp16, exact for a bf16 q in [6e-5, 65504] and for the fp8 K, V
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_sum = tl.zeros([BLOCK_G], tl.float32)
    if SINK:  # split 0 starts from the head's sink: one more key of logit s_h and value 0
        first = gmask & (split == 0)
        m = tl.where(first, tl.load(sink_ptr + heads, mask=gmask, other=0.0).to(tl.float32), m)
        l_sum = tl.where(first, 1.0, l_sum)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    k_base = k_ptr + b * s_kb + hkv * s_kh
    v_base = v_ptr + b * s_vb + hkv * s_vh
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        nmask = offs_n < end
        kv_mask = nmask[:, None] & dmask[None, :]
        # int8 / fp8 values convert exactly to bf16; their per-token scales are applied to the
        # scores (K) and to the probabilities (V), not to every element
        k = tl.load(k_base + offs_n[:, None] * s_ks + offs_d[None, :], mask=kv_mask,
                    other=0.0).to(q.dtype)
        v = tl.load(v_base + offs_n[:, None] * s_vs + offs_d[None, :], mask=kv_mask,
                    other=0.0).to(q.dtype)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        if QUANT:
            s = s * tl.load(ks_ptr + b * s_sb + hkv * s_sh + offs_n, mask=nmask, other=0.0)[None, :]
        s = tl.where(nmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l_sum = l_sum * alpha + tl.sum(p, axis=1)
        if QUANT:  # fp8: x PV_SCALE keeps p * v_scale in fp16's normal range; divided out below
            vsc = tl.load(vs_ptr + b * s_sb + hkv * s_sh + offs_n, mask=nmask, other=0.0)
            if OPS16:
                vsc = vsc * PV_SCALE
            pv = p * vsc[None, :]
        else:
            pv = p
        acc = acc * alpha[:, None] + tl.dot(pv.to(q.dtype), v)
        m = m_new
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    empty = l_sum == 0.0
    if OPS16:
        acc = acc * (1.0 / PV_SCALE)
    out = acc / tl.where(empty, 1.0, l_sum)[:, None]
    lse = tl.where(empty, float("-inf"), m + tl.log(tl.where(empty, 1.0, l_sum)))
    row = (b * n_heads + heads) * n_splits + split
    tl.store(o_ptr + row[:, None] * BLOCK_D + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=gmask[:, None])
    tl.store(lse_ptr + row, lse, mask=gmask)
    if MERGE:  # the group's last program to finish merges its splits (kernels.split_merge)
        cnt = cnt_ptr + b * n_kv_heads + hkv
        tl.debug_barrier()  # every thread's partials before the count (CUDA's grid-sync pattern)
        if tl.atomic_add(cnt, 1, sem="acq_rel") == n_splits - 1:
            tl.debug_barrier()
            tl.store(cnt, 0)
            merge_group(o_ptr, lse_ptr, out_ptr, b, hkv, n_splits, n_heads, offs_d, dmask, G,
                        MERGE_GC, BLOCK_D, D, BLOCK_S)


@triton.jit
def _rope_q(q, q_rows, qm, cos_ptr, sin_ptr, pos, offs_d, dmask, HALF: tl.constexpr):
    # q [BLOCK_G, BLOCK_D] rotated at pos as kernels.rope._rotated rotates it: the tables rounded
    # to q's dtype, float32 products, one rounding back (the partner half read again from q_rows)
    dt = q.dtype
    lo = offs_d < HALF
    part = tl.where(lo, offs_d + HALF, offs_d - HALF)
    half = tl.where(lo, offs_d, offs_d - HALF)
    c = tl.load(cos_ptr + pos.to(tl.int64) * 2 * HALF + half, mask=dmask, other=0.0)
    s = tl.load(sin_ptr + pos.to(tl.int64) * 2 * HALF + half, mask=dmask, other=0.0)
    c = c.to(dt).to(tl.float32)[None, :]
    s = s.to(dt).to(tl.float32)[None, :]
    qp = tl.load(q_rows + part[None, :], mask=qm, other=0.0).to(tl.float32)
    qf = q.to(tl.float32)
    return tl.where(lo[None, :], qf * c - qp * s, qf * c + qp * s).to(dt)


@triton.jit
def _write_new_kv(kn, vn, kr, cos_ptr, sin_ptr, pos, slot, k_head, v_head, s_ks, ks_head,
                  vs_head, QUANT: tl.constexpr, QMAX_: tl.constexpr, HALF: tl.constexpr,
                  BLOCK_HALF: tl.constexpr):
    # the new token's k (rotated at pos) and v of one KV head into the cache at slot, quantized on
    # the way: kernels.rope's _rope_kv_kernel for one head (its helpers, its numerics). A quantized
    # cache quantizes the rotated k as stored in the activation dtype: through the scratch row kr
    # (the inputs are left as they were: the autotuner runs the kernel again on them)
    offs = tl.arange(0, BLOCK_HALF)
    dmask = offs < HALF
    m = dmask[None, :]
    one = tl.full([1], 1, tl.int1)
    p64 = pos.to(tl.int64)
    c = tl.load(cos_ptr + p64 * 2 * HALF + offs, mask=dmask, other=0.0)
    s = tl.load(sin_ptr + p64 * 2 * HALF + offs, mask=dmask, other=0.0)
    p64 = slot.to(tl.int64)  # where it is stored
    kp = kn + offs[None, :]
    r1, r2 = _rotated(kp, m, c, s, HALF)
    if QUANT != 0:  # quantize the k as stored (see _rope_kv_kernel)
        krp = kr + offs[None, :]
        tl.store(krp, r1, mask=m)
        tl.store(krp + HALF, r2, mask=m)
        tl.debug_barrier()
        r1 = tl.load(krp, mask=m, other=0.0)
        r2 = tl.load(krp + HALF, mask=m, other=0.0)
    zero = tl.zeros([1], tl.int64)
    _store_kv(r1.to(tl.float32), r2.to(tl.float32), k_head + p64 * s_ks + offs[None, :],
              ks_head + p64 + zero, m, one, QUANT, QMAX_, HALF)
    vp = vn + offs[None, :]
    v1 = tl.load(vp, mask=m, other=0.0).to(tl.float32)
    v2 = tl.load(vp + HALF, mask=m, other=0.0).to(tl.float32)
    _store_kv(v1, v2, v_head + p64 * s_ks + offs[None, :], vs_head + p64 + zero, m, one, QUANT,
              QMAX_, HALF)


# On the GPU, tile length, warps and stages tuned once per shape class (Triton's autotuner, each
# config timed in a CUDA graph: launched from Python a short kernel times the host), kept per
# device (``kernels.tuning``); one fixed config in the interpreter and with autotune off.
_CONFIGS = [triton.Config({"BLOCK_N": bn}, num_warps=w, num_stages=st)
            for bn in (64, 128) for w, st in ((4, 2), (4, 3), (8, 3))]
# one-byte caches: a 128-position tile is only 8-16 KB; longer tiles keep more bytes in flight
_CONFIGS_Q = _CONFIGS + [triton.Config({"BLOCK_N": 256}, num_warps=w, num_stages=st)
                         for w, st in ((4, 2), (8, 2), (8, 3))]
_FIXED = {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
_KEY = ["D", "G", "QUANT", "split_len", "MERGE", "n_splits", "ROPE", "MERGE_GC"]
_ALLOWED: list = []  # a new shape's autotuning bounded to these configs (``tuning.candidates``)


def _prune(configs, nargs, **kw):
    bounded = [c for c in configs if tuning.config_dict(c) in _ALLOWED]
    return bounded or configs


_split_tuned = triton.autotune(_CONFIGS, key=_KEY, do_bench=graph_bench,
                               prune_configs_by={"early_config_prune": _prune})(_split_kernel)
_split_tuned_q = triton.autotune(_CONFIGS_Q, key=_KEY, do_bench=graph_bench,
                                 prune_configs_by={"early_config_prune": _prune})(_split_kernel)
SPLIT_ALIGN = 128  # split_len is a multiple of every BLOCK_N above (256 for one-byte caches)
# programs per SM the split plan aims at (kernels.split_merge.plan_splits): 2 against 4 measured
# 29.4 / 30.9 us (main job, G = 4), 98.1 / 99.5 (MHA), 361 / 396 (batch 64 x 8k) on the H100
PER_SM = 2
# one-byte caches: one wave of the n128 tile (4 programs a SM at 128 registers) at head_dim 64,
# half at 128, to the nearest whole split; where one split a (sequence, KV head) makes that,
# PER_SM_FILL (a shorter tail). H100 b8 x 4k int8, against 16 everywhere: MHA 69.5 -> 63.6 us,
# G 4 23.6 -> 22.5, G 4 head_dim 128 43.6 -> 39.1; b64 x 8k as before (decode_levers_h100 s. 19)
PER_SM_Q, PER_SM_FILL = 4.5, 16
# H100 (``bench.attention_probe levers``, decode_levers_h100.md): 16-bit partials slower on most
# shapes (1B b1 6.21 -> 7.13 us): off; the merge kernel under PDL (the call's ``pdl``; it waits
# for phase 1's memory): MQA at b8 x 4k 11.45 -> 10.29 us.
PARTIALS_16, MERGE_PDL = False, True
MERGE_BUDGET = 8192  # float32 elements of one in-kernel merge tile (kernels.split_merge.group_chunk)
N_SM_DEFAULT = 132  # the H100 / H200's SMs: ``launches`` for a device not at hand


def plan(batch: int, n_kv_heads: int, G: int, head_dim: int, capacity: int, quant: bool,
         n_sm: int) -> tuple[int, int, bool]:
    """``(n_splits, split_len, fold)`` of a call on a device of ``n_sm`` SMs: the split plan
    (``kernels.split_merge.plan_splits``; one-byte caches ``PER_SM_Q``) and whether the merge
    runs in the same launch (``kernels.split_merge.fold_pays``)."""
    bh, per_sm = batch * n_kv_heads, PER_SM
    if quant:  # the splits wanted, as plan_splits takes them for one (sequence, KV head), 1 SM
        want = round(PER_SM_Q * n_sm * 64 / head_dim / bh)
        bh, n_sm, per_sm = (1, 1, want) if want > 1 else (bh, n_sm, PER_SM_FILL)
    n_splits, split_len = plan_splits(bh, 1, capacity, 2 * SPLIT_ALIGN if quant else SPLIT_ALIGN,
                                      n_sm, per_sm)
    return n_splits, split_len, fold_pays(G, n_splits)


def launches(batch: int, n_kv_heads: int, G: int, head_dim: int, capacity: int, quant: bool,
             n_sm: int = N_SM_DEFAULT) -> int:
    """Kernels one GPU call launches: 1 with the merge folded in, else 2 (``plan``)."""
    return 1 if plan(batch, n_kv_heads, G, head_dim, capacity, quant, n_sm)[2] else 2


def rope_in_attention() -> bool:
    """Whether the model folds a decode step's RoPE and cache write into this kernel's launch
    (``switches.rope_in_attention``, on by default; read at each cache setup)."""
    return switches.current().rope_in_attention


def _interpreted(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" or os.environ.get("TRITON_INTERPRET") == "1"


def _n_sm(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     pos: torch.Tensor, k_scale: torch.Tensor | None = None,
                     v_scale: torch.Tensor | None = None, sm_scale: float | None = None,
                     fold_merge: bool | None = None, pdl: bool = False,
                     new_kv: tuple | None = None, sinks: torch.Tensor | None = None
                     ) -> torch.Tensor:
    """Attention of one new token per sequence over cache positions ``[0, pos + 1)``; over a
    ring of ``S`` slots (a sliding window of ``S`` positions: ``pos`` at slot ``pos % S``) when
    ``pos + 1 > S``: the last ``S`` positions.

    Args:
        q: ``[B, H, D]`` (or ``[B, H, 1, D]``), last dim contiguous.
        k_cache, v_cache: ``[B, Hkv, S, D]`` (last dim contiguous, same strides); bf16/fp16, or
            int8 / float8_e4m3fn with ``k_scale``/``v_scale`` ``[B, Hkv, S]`` float32.
        pos: int64 device tensor whose first element is the new token's position (the token's
            K/V must already be in the cache, unless ``new_kv`` brings them).
        sm_scale: softmax scale, default ``D ** -0.5``.
        fold_merge: merge the splits in the last program of each group (one launch), or in a
            kernel of its own; default: folded where the merge is small (``plan``) on the GPU,
            never in the interpreter (it runs programs one by one: the same result).
        pdl: launch with programmatic dependent launch (Hopper; see ``kernels.gemv``).
        new_kv: ``(k, v, cos, sin)``: the new token's k and v ``[B, Hkv, D]`` before RoPE (views
            of the qkv GEMM output are fine), and the RoPE tables ``[max_seq_len, D]`` float32.
            Then q is taken before RoPE too and rotated in registers, and the program whose split
            holds ``pos`` writes the rotated k and the v into the cache (quantized on the way)
            before reading it: ``kernels.rope.rope_kv_write_`` folded in, one launch fewer.
            The inputs are not modified (running it twice writes the same cache).
        sinks: ``[H]`` attention-sink logits (gpt-oss: a learned logit per query head in the
            softmax's denominator, attending to nothing), or None.

    Returns:
        ``[B, H, D]`` (``[B, H, 1, D]`` if q was 4-D) in q's dtype.

    Raises:
        ValueError: ``new_kv`` of another shape than ``[B, Hkv, D]`` or tables not float32
            ``[max_seq_len, D]``.
    """
    squeeze = q.dim() == 4
    q = q[:, :, 0] if squeeze else q
    B, H, D = q.shape
    Hkv, S = k_cache.shape[1], k_cache.shape[2]
    G = H // Hkv
    quant = k_scale is not None
    BLOCK_D = max(16, triton.next_power_of_2(D))
    n_splits, split_len, fold = plan(B, Hkv, G, D, S, quant, _n_sm(q.device))
    sixteen = PARTIALS_16 and q.dtype in (torch.bfloat16, torch.float16)
    o_part = torch.empty(B * H * n_splits, BLOCK_D, device=q.device,
                         dtype=q.dtype if sixteen else torch.float32)
    lse = torch.empty(B * H * n_splits, device=q.device, dtype=torch.float32)
    ks, vs = (k_scale, v_scale) if quant else (lse, lse)
    interp = _interpreted(q)
    merge = (fold and not interp) if fold_merge is None else fold_merge
    pdl = pdl and not interp
    out = torch.empty(B, H, D, device=q.device, dtype=q.dtype)
    cnt = counters(q.device, B * Hkv) if merge else lse
    kn, vn, cos, sin = new_kv if new_kv is not None else (q, q, lse, lse)
    kr = lse
    if new_kv is not None:
        if kn.shape != (B, Hkv, D) or vn.shape != (B, Hkv, D):
            raise ValueError(f"new_kv's k and v must be [B, Hkv, D] = {[B, Hkv, D]}, got "
                             f"{list(kn.shape)} and {list(vn.shape)}")
        if cos.dtype != torch.float32 or sin.dtype != torch.float32 or cos.shape[-1] != D:
            raise ValueError("new_kv's RoPE tables must be float32 [max_seq_len, head_dim]")
        assert kn.stride() == vn.stride() and kn.stride(-1) == 1
        assert cos.is_contiguous() and sin.is_contiguous() and k_cache.stride() == v_cache.stride()
        if quant:  # the rotated k in the activation dtype, before it is quantized
            kr = torch.empty(B * Hkv * D, device=q.device, dtype=kn.dtype)
    if sinks is not None:
        assert sinks.shape == (H,) and sinks.is_contiguous()
    args = (q, k_cache, v_cache, ks, vs, pos, o_part, lse, cnt, out, kn, vn, cos, sin, kr,
            lse if sinks is None else sinks,
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
            ks.stride(0) if quant else 0, ks.stride(1) if quant else 0,
            kn.stride(0), kn.stride(1), sm_scale or D**-0.5, split_len, n_splits, H, Hkv, S)
    BLOCK_S = max(2, triton.next_power_of_2(n_splits))
    fp8 = quant and k_cache.dtype != torch.int8
    meta = dict(G=G, BLOCK_G=max(16, triton.next_power_of_2(G)), D=D, BLOCK_D=BLOCK_D,
                QUANT=(2 if fp8 else 1) if quant else 0, MERGE=merge,
                OPS16=fp8 and q.dtype in (torch.bfloat16, torch.float16) and not interp,
                BLOCK_S=BLOCK_S, PDL=pdl, PV_SCALE=PV_SCALE, ROPE=new_kv is not None,
                HALF=D // 2, BLOCK_HALF=triton.next_power_of_2(max(D // 2, 1)),
                QMAX_=QMAX["fp8_e4m3" if fp8 else "int8"] if quant else 1.0,
                MERGE_GC=group_chunk(G, n_splits, BLOCK_D, MERGE_BUDGET) if merge else 1,
                SINK=sinks is not None,
                **({"launch_pdl": True} if pdl else {}))
    grid = (B, Hkv, n_splits)
    if interp:
        _split_kernel[grid](*args, **meta, BLOCK_N=64, F32=True)
    elif not switches.current().autotune:
        fixed = _FIXED if BLOCK_D <= 128 else {"BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
        _split_kernel[grid](*args, **meta, **fixed, F32=False)  # head_dim 256 fits in 2 stages
    else:  # tuned once per shape and device (kernels.tuning)
        variant = (str(q.dtype), str(k_cache.dtype), meta["QUANT"], int(meta["ROPE"]), int(merge),
                   int(pdl), int(meta["OPS16"]), int(switches.current().cold_tune))
        if sinks is not None:  # (a design without sinks keeps its shipped choices' key)
            variant += ("sink",)
        tuning.launch("decode_attention", _split_kernel, _split_tuned_q if quant else _split_tuned,
                      lambda m: grid, args, dict(meta, F32=False), variant,
                      (D, G, split_len, n_splits, meta["MERGE_GC"]), q.device, _ALLOWED)
    if not merge:
        pdl_merge = pdl and MERGE_PDL
        merge_kernel[(B * H,)](o_part, lse, out, n_splits, D=D, BLOCK_D=BLOCK_D,
                                BLOCK_S=BLOCK_S, PDL=pdl_merge, num_warps=4,
                                **({"launch_pdl": True} if pdl_merge else {}))
    return out[:, :, None] if squeeze else out


def reference(q, k_cache, v_cache, kv_len: int, k_scale=None, v_scale=None, sinks=None):
    """PyTorch reference: dequantize if needed, slice to ``kv_len`` (a ring of ``S`` slots: all
    of them once ``kv_len > S``), SDPA with GQA; with ``sinks [H]`` in float32 plain ops, the
    sink column joined to the softmax and dropped.

    q ``[B, H, D]`` -> ``[B, H, D]``."""
    if k_scale is not None:
        k_cache = (k_cache.float() * k_scale[..., None]).to(q.dtype)
        v_cache = (v_cache.float() * v_scale[..., None]).to(q.dtype)
    k, v = k_cache[:, :, :kv_len], v_cache[:, :, :kv_len]
    if sinks is None:
        y = torch.nn.functional.scaled_dot_product_attention(
            q[:, :, None], k, v, enable_gqa=k.shape[1] != q.shape[1])
        return y[:, :, 0]
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1).float(), v.repeat_interleave(G, 1).float()
    s = torch.einsum("bhd,bhsd->bhs", q.float(), k) * q.shape[-1] ** -0.5
    p = torch.cat([s, sinks.float()[None, :, None].expand(s.shape[0], -1, 1)], -1).softmax(-1)
    return torch.einsum("bhs,bhsd->bhd", p[..., :-1], v).to(q.dtype)
