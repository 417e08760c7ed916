"""Decode attention's split merge folded into the out_proj GEMV: worth building?

    python -m bench.merge_gemv_probe OUT_DIR

Where the group's merge is too large for decode attention's own launch (``G x splits > 64``:
the main job's designs of 1-4 KV heads at batch 8 x 4k), a decode layer runs
split kernel -> ``merge_kernel`` -> out_proj GEMV. This probe times the last two against one
kernel that does both: program ``(n_block, head)`` loads its ``[BLOCK_N, head_dim]`` slice of
``W_o`` (the first sub-tiles before its PDL wait), merges the head's splits for every sequence
from the partials (``o``, ``lse``: L2-resident), multiplies, and adds its ``[BLOCK_N, batch]``
product into a float32 workspace; the last of the ``n_heads`` programs of a column block writes
the output (the split-K pattern of ``kernels.gemv``). Each way timed over ``L`` layers of their
own weights and partials (more than 2.5x the L2) in a CUDA graph, under PDL, median of 5
replays (``kernels.graph_timing.time_ms``); the fused kernel at several tiles; outputs
compared. Writes ``merge_gemv.csv``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from bench.gpu import write_rows


@triton.jit
def merge_gemv_kernel(o_ptr, lse_ptr, w_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, H, n_splits,
                      D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      SUB_N: tl.constexpr, BLOCK_S: tl.constexpr, SC: tl.constexpr,
                      PDL: tl.constexpr):
    pid_n = tl.program_id(0)
    h = tl.program_id(1)
    K = H * D
    NSUB: tl.constexpr = BLOCK_N // SUB_N
    offs_d = tl.arange(0, D)
    offs_sub = tl.arange(0, SUB_N)
    n0 = pid_n * BLOCK_N
    w_cols = w_ptr + h * D + offs_d[None, :]
    w0 = tl.load(w_cols + (n0 + offs_sub)[:, None] * K)  # weights before the wait
    if PDL:
        tl.extra.cuda.gdc_wait()
    offs_m = tl.arange(0, BLOCK_M)
    mmask = offs_m < M
    rows = (offs_m * H + h) * n_splits
    offs_s = tl.arange(0, BLOCK_S)
    lmask = mmask[:, None] & (offs_s < n_splits)[None, :]
    lse = tl.load(lse_ptr + rows[:, None] + offs_s[None, :], mask=lmask, other=float("-inf"))
    mx = tl.where(mmask, tl.max(lse, axis=1), 0.0)
    den = tl.sum(tl.where(lmask, tl.exp(lse - mx[:, None]), 0.0), axis=1)
    xs = tl.zeros([BLOCK_M, D], tl.float32)
    for s0 in range(0, n_splits, SC):
        offs_c = s0 + tl.arange(0, SC)
        cm = mmask[:, None] & (offs_c < n_splits)[None, :]
        lc = tl.load(lse_ptr + rows[:, None] + offs_c[None, :], mask=cm, other=float("-inf"))
        wc = tl.where(cm, tl.exp(lc - mx[:, None]), 0.0)
        oc = tl.load(o_ptr + (rows[:, None, None] + offs_c[None, :, None]) * D
                     + offs_d[None, None, :], mask=cm[:, :, None], other=0.0)
        xs += tl.sum(oc * wc[:, :, None], axis=1)
    x = (xs / tl.where(mmask, den, 1.0)[:, None]).to(w_ptr.dtype.element_ty)
    w = w0
    for j in tl.static_range(NSUB):
        if j + 1 < NSUB:
            w_next = tl.load(w_cols + (n0 + (j + 1) * SUB_N + offs_sub)[:, None] * K)
        acc = tl.dot(w, tl.trans(x))  # [SUB_N, BLOCK_M]
        offs_n = n0 + j * SUB_N + offs_sub
        tl.atomic_add(ws_ptr + offs_m[None, :] * N + offs_n[:, None], acc, mask=mmask[None, :],
                      sem="relaxed")
        if j + 1 < NSUB:
            w = w_next
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    tl.debug_barrier()
    if tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel") == H - 1:
        tl.debug_barrier()
        for j in tl.static_range(NSUB):
            offs_n = n0 + j * SUB_N + offs_sub
            p = ws_ptr + offs_m[None, :] * N + offs_n[:, None]
            v = tl.load(p, mask=mmask[None, :], other=0.0, cache_modifier=".cg")
            tl.debug_barrier()
            tl.store(p, tl.zeros([SUB_N, BLOCK_M], tl.float32), mask=mmask[None, :])
            tl.store(y_ptr + offs_m[None, :] * N + offs_n[:, None],
                     v.to(y_ptr.dtype.element_ty), mask=mmask[None, :])
        tl.store(cnt_ptr + pid_n, 0)


def merge_gemv(o, lse, w, n_splits, B, H, D, tile, ws, cnt, pdl):
    """The fused call: ``o [B*H*n_splits, D]`` float32, ``lse [B*H*n_splits]``, ``w [N, H*D]``;
    returns ``[B, N]`` in w's dtype. ``ws [B, N]`` float32 and ``cnt`` int32 zeroed, left zeroed."""
    block_n, sub_n, sc, warps = tile
    N = w.shape[0]
    y = torch.empty(B, N, device=w.device, dtype=w.dtype)
    merge_gemv_kernel[(N // block_n, H)](
        o, lse, w, y, ws, cnt, B, N, H, n_splits, D=D, BLOCK_M=16, BLOCK_N=block_n,
        SUB_N=sub_n, BLOCK_S=max(2, triton.next_power_of_2(n_splits)), SC=sc, PDL=pdl,
        num_warps=warps, **({"launch_pdl": True} if pdl else {}))
    return y


def reference(o, lse, w, n_splits, B, H, D):
    """Merge (float32, the output rounded to w's dtype as ``merge_kernel`` writes it) then x @ W^T."""
    o = o.view(B, H, n_splits, D)
    lse = lse.view(B, H, n_splits)
    wgt = torch.exp(lse - lse.max(-1, keepdim=True).values)
    x = (o * wgt[..., None]).sum(2) / wgt.sum(-1, keepdim=True)
    return (x.to(w.dtype).reshape(B, H * D).float() @ w.float().T).to(w.dtype)


TILES = [(512, 128, 8, 4), (512, 128, 8, 8), (256, 128, 8, 4), (256, 64, 16, 4),
         (1024, 128, 8, 8), (128, 128, 8, 4)]


def _time(fn, L):
    """us per layer of ``fn`` (``L`` layers), replayed in a CUDA graph (``kernels.graph_timing``)."""
    from kernels.graph_timing import time_ms

    return time_ms(fn, reps=3, cold=False) * 1e3 / L


def _shape(name, B, H, Hkv, D, S, n_sm):
    """Both ways on one shape: the rows."""
    from kernels import decode_attention as da
    from kernels.gemv import gemv
    from kernels.split_merge import counters, merge_kernel

    dev = "cuda"
    n_splits, _, fold = da.plan(B, Hkv, H // Hkv, D, S, False, n_sm)
    N, L = H * D, 16
    layers = [(torch.randn(B * H * n_splits, D, device=dev),
               torch.randn(B * H * n_splits, device=dev) * 3,
               torch.randn(N, H * D, device=dev, dtype=torch.bfloat16) * 0.02) for _ in range(L)]
    ref = reference(*layers[0], n_splits, B, H, D)
    merged = torch.empty(B, H, D, device=dev, dtype=torch.bfloat16)
    bs = max(2, triton.next_power_of_2(n_splits))
    head = dict(shape=name, n_splits=n_splits, fold=fold)

    def base():
        for o, lse, w in layers:
            merge_kernel[(B * H,)](o, lse, merged, n_splits, D=D, BLOCK_D=D, BLOCK_S=bs,
                                   PDL=True, num_warps=4, launch_pdl=True)
            gemv(merged.view(B, H * D), w, pdl=True)

    rows = []
    med = _time(base, L)
    merge_kernel[(B * H,)](layers[0][0], layers[0][1], merged, n_splits, D=D, BLOCK_D=D,
                           BLOCK_S=bs, num_warps=4)
    err = (gemv(merged.view(B, H * D), layers[0][2], pdl=False).float() - ref.float()).abs().max()
    rows.append(dict(head, way="merge_kernel+gemv", tile="shipped", us=round(med, 3),
                     max_abs_err=round(err.item(), 5)))
    print(rows[-1], flush=True)
    ws = torch.zeros(B, N, device=dev, dtype=torch.float32)
    cnt = counters(torch.device(dev), N // 64, owner="merge_gemv_probe")
    for tile in TILES:
        def fused(tile=tile):
            for o, lse, w in layers:
                merge_gemv(o, lse, w, n_splits, B, H, D, tile, ws, cnt, True)
        try:
            med = _time(fused, L)
            got = merge_gemv(*layers[0], n_splits, B, H, D, tile, ws, cnt, False)
            err = (got.float() - ref.float()).abs().max().item()
            r = dict(head, way="fused", tile="n{}/{} sc{} w{}".format(*tile), us=round(med, 3),
                     max_abs_err=round(err, 5))
        except Exception as e:  # a tile the compiler refuses: kept as a row
            r = dict(head, way="fused", tile=str(tile), error=str(e)[:200])
        rows.append(r)
        print(r, flush=True)
    return rows


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for shape in [("flagship_g32", 8, 32, 1, 64, 4160), ("flagship_g16", 8, 32, 2, 64, 4160),
                  ("flagship_g8", 8, 32, 4, 64, 4160)]:
        rows += _shape(*shape, n_sm)
        torch.cuda.empty_cache()
    write_rows(out / "merge_gemv.csv", rows)
    print(torch.cuda.get_device_name())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
