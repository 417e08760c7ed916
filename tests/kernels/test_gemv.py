"""Decode GEMV (with its norm / SwiGLU prologues), fused RoPE + KV-cache write, and the in-kernel
split merge of decode attention, against their PyTorch references (odd shapes included)."""


import pytest
import torch

from kernels import decode_attention as da
from kernels import decode_linear, gemv, kv_quant, rope
from kernels.split_merge import counters, plan_splits
from tests.kernels.conftest import DEVICE, DTYPES, INTERPRETED, TOL, close, exact

# odd widths on purpose: N and K not multiples of the tile, K below one tile, a GQA-like N
SHAPES = [(1, 96, 200), (3, 130, 64), (16, 48, 320), (1, 257, 1000), (8, 64, 80)]


def close_gemm(got, want, dtype):
    """A GEMM output's tolerance: the dtype's, with the absolute part scaled by the output's size
    (a K-term bf16 dot product rounded at another point, or truncated as the interpreter does,
    moves an output by a few ulps of the largest ones)."""
    rtol, atol = TOL[dtype]
    scale = want.float().abs().max().item()
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=max(atol, atol * scale))


def _w(N, K, dtype, g):
    return (torch.randn(N, K, device=DEVICE, dtype=dtype, generator=g) / K**0.5).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_gemv_plain(M, N, K, dtype, bias):
    g = torch.Generator(DEVICE).manual_seed(M * N + K)
    x = torch.randn(M, K, device=DEVICE, dtype=dtype, generator=g)
    w = _w(N, K, dtype, g)
    b = torch.randn(N, device=DEVICE, dtype=dtype, generator=g) if bias else None
    close_gemm(gemv.gemv(x, w, b), gemv.reference(x, w, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("with_residual", [False, True])
def test_gemv_norm_prologue(M, N, K, dtype, with_residual):
    g = torch.Generator(DEVICE).manual_seed(M + N * K)
    x = torch.randn(1, M, K, device=DEVICE, dtype=dtype, generator=g)
    r = torch.randn(1, M, K, device=DEVICE, dtype=dtype, generator=g) if with_residual else None
    nw = 1 + 0.1 * torch.randn(K, device=DEVICE, dtype=dtype, generator=g)
    w = _w(N, K, dtype, g)
    got = gemv.gemv(x, w, None, "norm", nw, 1e-5, r)
    want = gemv.reference(x, w, None, "norm", nw, 1e-5, r)
    if with_residual:
        assert got[0].shape == (1, M, N) and got[1].shape == (1, M, K)
        close_gemm(got[0], want[0], dtype)
        exact(got[1], want[1])  # the residual add is exact
    else:
        close_gemm(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_gemv_swiglu_prologue(M, N, K, dtype):
    g = torch.Generator(DEVICE).manual_seed(N + K)
    h = torch.randn(M, 2 * K, device=DEVICE, dtype=dtype, generator=g)
    w = _w(N, K, dtype, g)
    close_gemm(gemv.gemv(h, w, prologue="swiglu"), gemv.reference(h, w, prologue="swiglu"), dtype)


@pytest.mark.parametrize("M", [1, 5])
@pytest.mark.parametrize("prologue", ["none", "norm", "swiglu"])
def test_gemv_split_k(M, prologue):
    """K split over 3 programs per column, summed in the workspace by the column's last program;
    twice in a row (the workspace and counters reset themselves)."""
    N, K, dtype = 72, 700, torch.float32
    g = torch.Generator(DEVICE).manual_seed(M)
    w = _w(N, K, dtype, g)
    cfg = {"BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 3, "num_warps": 4, "num_stages": 2}
    for _ in range(2):
        x = torch.randn(M, 2 * K if prologue == "swiglu" else K, device=DEVICE, generator=g)
        r = torch.randn(M, K, device=DEVICE, generator=g) if prologue == "norm" else None
        nw = torch.rand(K, device=DEVICE, generator=g) + 0.5
        got = gemv.gemv(x, w, None, prologue, nw, 1e-5, r, config=cfg)
        want = gemv.reference(x, w, None, prologue, nw, 1e-5, r)
        if prologue == "norm":
            close_gemm(got[1], want[1], dtype)
            got, want = got[0], want[0]
        close_gemm(got, want, dtype)
    ws, ss, cnt = gemv._workspace(w.device, M, N)
    assert not ws.any() and not ss.any() and not cnt.any()


def _switch_is_exact(M, split_k, prologue, seed, switch, block_n):
    """The kernel with config ``switch`` off and on (a fixed tile of ``block_n`` columns, K 330
    ending mid-tile, ``split_k`` ranges): the same output bit for bit (within float32 rounding
    under split-K, whose partial sums arrive in either order), the residual stream h bit for bit,
    and both against the reference."""
    N, K, dtype = 40, 330, torch.float32
    g = torch.Generator(DEVICE).manual_seed(seed)
    w = _w(N, K, dtype, g)
    x = torch.randn(M, 2 * K if prologue == "swiglu" else K, device=DEVICE, generator=g)
    r = torch.randn(M, K, device=DEVICE, generator=g) if prologue == "norm" else None
    nw = torch.rand(K, device=DEVICE, generator=g) + 0.5
    out = {}
    for on in (0, 1):
        cfg = {"BLOCK_N": block_n, "BLOCK_K": 64, "SPLIT_K": split_k, switch: on, "num_warps": 4,
               "num_stages": 2}
        out[on] = gemv.gemv(x, w, None, prologue, nw, 1e-5, r, config=cfg)
    want = gemv.reference(x, w, None, prologue, nw, 1e-5, r)
    if prologue == "norm":
        exact(out[1][1], out[0][1])
        close_gemm(out[1][1], want[1], dtype)
        out, want = {k: v[0] for k, v in out.items()}, want[0]
    if split_k == 1:
        exact(out[1], out[0])
    else:
        close_gemm(out[1], out[0], dtype)
    close_gemm(out[1], want, dtype)


@pytest.mark.skipif(DEVICE != "cpu", reason="the probe's tiles are sized for the GPU's run")
@pytest.mark.parametrize("prologue", ["none", "norm", "swiglu"])
def test_tma_probe_kernel_matches_the_reference(prologue):
    """``bench.tma_gemv_probe``'s kernel (weight tiles through a tensor descriptor) gives the
    reference's output at an odd N, split over K or not, twice (its workspace resets itself)."""
    from bench.tma_gemv_probe import tma_gemv
    N, K, dtype = 72, 256, torch.float32
    g = torch.Generator(DEVICE).manual_seed(7)
    w = _w(N, K, dtype, g)
    for tile in ((32, 64, 1, 4, 2), (32, 64, 3, 4, 2), (32, 64, 3, 4, 2)):
        x = torch.randn(5, 2 * K if prologue == "swiglu" else K, device=DEVICE, generator=g)
        r = torch.randn(5, K, device=DEVICE, generator=g) if prologue == "norm" else None
        nw = torch.randn(K, device=DEVICE, generator=g) if prologue == "norm" else None
        got = tma_gemv(x, w, prologue, nw, 1e-5, r, tile)
        want = gemv.reference(x, w, None, prologue, nw, 1e-5, r)
        if r is not None:
            close_gemm(got[1], want[1], dtype)
            got, want = got[0], want[0]
        close_gemm(got, want, dtype)


@pytest.mark.parametrize("M", [1, 3])
@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("prologue", ["none", "norm", "swiglu"])
def test_gemv_prefetched_activations(M, split_k, prologue):
    """PREFETCH_X (the next activation tiles loaded a step ahead: x, the residual and the norm
    weight, or gate and up) gives what the unprefetched kernel gives, bit for bit, over K tiles
    that end mid-tile and split-K ranges; the residual stream h too."""
    _switch_is_exact(M, split_k, prologue, M * 7 + split_k, "PREFETCH_X", 8)


@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("prologue", ["none", "norm", "swiglu"])
def test_gemv_weights_ahead_on_the_dot_path(split_k, prologue):
    """W_AHEAD (the dot path's weight tiles loaded a step ahead by hand, the first before the PDL
    wait) gives what the compiler-pipelined loads give, bit for bit, with K ending mid-tile and
    split-K ranges; the residual stream h too."""
    _switch_is_exact(5, split_k, prologue, 11 * split_k, "W_AHEAD", 16)


def test_a_new_dot_path_shape_tries_the_seed_tiles_beside_the_chosen_ones():
    """With configs chosen for other shapes (``_ALLOWED``), a new dot-path shape's autotuning is
    bounded to them plus ``_SEEDS`` (one tile per shape class), every seed a tile of the space;
    the one-row path stays bounded to the chosen configs alone."""
    from kernels import tuning

    chosen = tuning.config_dict(next(c for c in gemv._CONFIGS if c.kwargs["BLOCK_N"] == 16
                                     and c.kwargs["BLOCK_K"] == 256 and c.kwargs["SPLIT_K"] == 1
                                     and c.num_warps == 4 and c.num_stages == 3
                                     and not c.kwargs["W_AHEAD"] and not c.kwargs["PREFETCH_X"]))
    gemv._ALLOWED[:] = [chosen]
    try:
        dot = [tuning.config_dict(c) for c in gemv._prune(gemv._CONFIGS, {"BLOCK_M": 16})]
        one = [tuning.config_dict(c) for c in gemv._prune(gemv._CONFIGS, {"BLOCK_M": 1})]
    finally:
        gemv._ALLOWED.clear()
    assert chosen in dot and all(s in dot for s in gemv._SEEDS)
    assert len(dot) == len(gemv._SEEDS) + 1
    assert one == [chosen]


def test_autotune_space_prefetches_one_row_only():
    """PREFETCH_X is tuned for one row (beside every unprefetched tile) and never for the dot
    path; W_AHEAD for the dot path only; ``switches.gemv_prefetch=False`` and
    ``switches.gemv_w_ahead=False`` leave them out (the levers' before/after)."""
    from kernels import switches

    one = gemv._prune(gemv._CONFIGS, {"BLOCK_M": 1})
    dot = gemv._prune(gemv._CONFIGS, {"BLOCK_M": 16})
    assert sum(c.kwargs["PREFETCH_X"] for c in one) == len(one) // 2 == len(gemv._M1)
    assert not any(c.kwargs["PREFETCH_X"] for c in dot) and len(dot) == 2 * len(gemv._DOT)
    assert sum(c.kwargs["W_AHEAD"] for c in dot) == len(gemv._DOT)
    assert not any(c.kwargs["W_AHEAD"] for c in one)
    with switches.use(gemv_prefetch=False):
        off = gemv._prune(gemv._CONFIGS, {"BLOCK_M": 1})
    assert len(off) == len(gemv._M1) and not any(c.kwargs["PREFETCH_X"] for c in off)
    with switches.use(gemv_w_ahead=False):
        off = gemv._prune(gemv._CONFIGS, {"BLOCK_M": 16})
    assert len(off) == len(gemv._DOT) and not any(c.kwargs["W_AHEAD"] for c in off)


def test_gemv_refuses_bad_input():
    w = torch.zeros(8, 32, device=DEVICE)
    with pytest.raises(ValueError, match="at most 16 rows"):
        gemv.gemv(torch.zeros(17, 32, device=DEVICE), w)
    with pytest.raises(ValueError, match="last dim 32 != 64"):
        gemv.gemv(torch.zeros(2, 32, device=DEVICE), w, prologue="swiglu")
    with pytest.raises(ValueError, match="prologue must be"):
        gemv.gemv(torch.zeros(2, 32, device=DEVICE), w, prologue="gelu")


def test_linear_matches_nn_linear_with_norm():
    from zoo.norms import RMSNorm

    g = torch.Generator(DEVICE).manual_seed(5)
    lin = torch.nn.Linear(96, 72, bias=True).to(DEVICE)
    norm = RMSNorm(96, 1e-6).to(DEVICE)
    with torch.no_grad():
        norm.weight.normal_(generator=g)
    x, r = torch.randn(2, 1, 96, device=DEVICE), torch.randn(2, 1, 96, device=DEVICE)
    y, h = decode_linear.linear(x, lin, "norm", norm, r)
    close(h, x + r, torch.float32)
    close(y, lin(norm(x + r)), torch.float32)


@pytest.mark.parametrize("kv_dtype", ["bf16", "int8", "fp8_e4m3"])
@pytest.mark.parametrize("B,T,H,Hkv,D", [(2, 1, 8, 2, 64), (1, 3, 6, 3, 96), (3, 1, 4, 1, 128),
                                         (1, 2, 20, 4, 80)])
def test_rope_kv_write(kv_dtype, B, T, H, Hkv, D):
    from zoo import ModelConfig
    from zoo.cache import TORCH_DTYPES
    from zoo.rope_tables import rope_cache

    if INTERPRETED and kv_dtype == "fp8_e4m3":
        pytest.skip("the Triton interpreter's fp8 conversion does not round like the GPU (see "
                    "test_attention.py); the fused fp8 write is checked on the GPU")
    dtype, S = torch.bfloat16, 32
    cfg = ModelConfig.from_name("tiny", head_dim=D)
    cos, sin = rope_cache(cfg, S, DEVICE)
    g = torch.Generator(DEVICE).manual_seed(D * T + H)
    qkv = torch.randn(B, T, (H + 2 * Hkv) * D, device=DEVICE, dtype=dtype, generator=g)
    q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
    q, k, v = q.view(B, T, H, D), k.view(B, T, Hkv, D), v.view(B, T, Hkv, D)
    pos = torch.tensor([9, 30, 4][:T], device=DEVICE)
    want_q, want_k = rope.reference(q, k, cos[:, :], sin, pos)  # bf16 rounding like rope_
    v_ref = v.clone()
    quant = kv_dtype != "bf16"
    kc = torch.zeros(B, Hkv, S, D, device=DEVICE, dtype=TORCH_DTYPES[kv_dtype])
    vc = torch.zeros_like(kc)
    ks = torch.full((B, Hkv, S), -1.0, device=DEVICE) if quant else None
    vs = torch.full((B, Hkv, S), -1.0, device=DEVICE) if quant else None
    rope.rope_kv_write_(q, k, v, cos, sin, pos, kc, vc, ks, vs, kv_dtype=kv_dtype, k_inplace=True)
    close(q, want_q, dtype)
    close(k, want_k, dtype)  # k_inplace: the prefill's SDPA reads the rotated k
    # the fused kernel writes exactly what the unfused path (rope_, then quantize_kv or a copy)
    # writes; kv_quant's own test checks that against the torch reference
    kt, vt = k.transpose(1, 2), v_ref.transpose(1, 2)  # [B, Hkv, T, D]
    kc2, vc2 = torch.zeros_like(kc), torch.zeros_like(vc)
    if quant:
        ks2, vs2 = torch.full_like(ks, -1.0), torch.full_like(vs, -1.0)
        kv_quant.quantize_kv(kt, kc2, ks2, pos, kv_dtype)
        kv_quant.quantize_kv(vt, vc2, vs2, pos, kv_dtype)
        exact(ks, ks2)
        exact(vs, vs2)
        wk, wks = kv_quant.reference(kt, kv_dtype)
        torch.testing.assert_close(ks[:, :, pos], wks, rtol=1e-6, atol=0)
    else:
        kc2.index_copy_(2, pos, kt)
        vc2.index_copy_(2, pos, vt)
    exact(kc, kc2)  # every position: nothing else written
    exact(vc, vc2)


@pytest.mark.parametrize("kv_dtype", [None, "int8"])
@pytest.mark.parametrize("H,Hkv,budget", [(8, 2, 8192), (20, 4, 0), (20, 4, 256), (32, 1, 8192)])
def test_decode_attention_merge_in_kernel(kv_dtype, H, Hkv, budget, monkeypatch):
    """The folded merge (last program of each group) equals the two-kernel path, twice in a row
    (the counters reset themselves), merging one query head per tile (budget 0), a part of an odd
    group (G = 5 in tiles of 2) or the whole group (MQA's 32 heads)."""
    from kernels.split_merge import group_chunk

    monkeypatch.setattr(da, "MERGE_BUDGET", budget)
    B, D, S = 2, 64, 700
    g = torch.Generator(DEVICE).manual_seed(11)
    q = torch.randn(B, H, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Hkv, S, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, Hkv, S, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    scales = (None, None)
    if kv_dtype:
        (k, ks), (v, vs) = kv_quant.reference(k, kv_dtype), kv_quant.reference(v, kv_dtype)
        scales = (ks, vs)
    if budget == 256 and DEVICE == "cpu":  # 2 splits on the interpreter's 4 "SMs": the tile
        n_splits, _ = plan_splits(B, Hkv, S, da.SPLIT_ALIGN, 4, da.PER_SM)  # holds 2 of 5 heads
        assert group_chunk(H // Hkv, n_splits, 64, budget) == 2
    for length in (650, 333):
        pos = torch.tensor([length - 1], device=DEVICE)
        two = da.decode_attention(q, k, v, pos, *scales, fold_merge=False)
        one = da.decode_attention(q, k, v, pos, *scales, fold_merge=True)
        close(one, two, torch.bfloat16)
        close(two, da.reference(q, k, v, length, *scales), torch.bfloat16)
    assert not counters(torch.device(DEVICE), B * Hkv)[:B * Hkv].any()


@pytest.mark.parametrize("kv_dtype", ["bf16", "int8", "fp8_e4m3"])
@pytest.mark.parametrize("B,H,Hkv,D,S,p", [(2, 8, 2, 64, 700, 650), (1, 20, 4, 80, 300, 129),
                                           (3, 4, 1, 128, 64, 0)])
def test_decode_attention_with_rope_and_kv_write_folded(kv_dtype, B, H, Hkv, D, S, p):
    """``new_kv``: RoPE of q in registers and the new k, v written into the cache by the split
    that holds the position, in the attention launch. The cache (and its scales) bit for bit what
    ``rope_kv_write_`` writes, the output what the two launches give; positions in a middle
    split, the last tile of a split and position 0; odd head_dim and group."""
    from zoo import ModelConfig
    from zoo.cache import TORCH_DTYPES
    from zoo.rope_tables import rope_cache

    if INTERPRETED and kv_dtype == "fp8_e4m3":
        pytest.skip("the Triton interpreter's fp8 conversion does not round like the GPU (see "
                    "test_attention.py); the fused fp8 write is checked on the GPU")
    dtype = torch.bfloat16
    cos, sin = rope_cache(ModelConfig.from_name("tiny", head_dim=D), S, DEVICE)
    g = torch.Generator(DEVICE).manual_seed(D + p)
    quant = kv_dtype != "bf16"
    kc = torch.randn(B, Hkv, S, D, device=DEVICE, dtype=dtype, generator=g)
    vc = torch.randn(B, Hkv, S, D, device=DEVICE, dtype=dtype, generator=g)
    ks = vs = None
    if quant:
        (kc, ks), (vc, vs) = kv_quant.reference(kc, kv_dtype), kv_quant.reference(vc, kv_dtype)
    qkv = torch.randn(B, 1, (H + 2 * Hkv) * D, device=DEVICE, dtype=dtype, generator=g)
    pos = torch.tensor([p], device=DEVICE)
    out, caches = {}, {}
    for fold in (False, True):
        buf = qkv.clone()
        q, k, v = buf.split([H * D, Hkv * D, Hkv * D], dim=-1)
        q, k, v = q.view(B, 1, H, D), k.view(B, 1, Hkv, D), v.view(B, 1, Hkv, D)
        c = [kc.clone(), vc.clone()] + ([ks.clone(), vs.clone()] if quant else [None, None])
        if fold:
            y = da.decode_attention(q[:, 0], c[0], c[1], pos, c[2], c[3],
                                    new_kv=(k[:, 0], v[:, 0], cos, sin))
        else:
            rope.rope_kv_write_(q, k, v, cos, sin, pos, c[0], c[1], c[2], c[3],
                                kv_dtype=kv_dtype if quant else None)
            y = da.decode_attention(q[:, 0], c[0], c[1], pos, c[2], c[3])
        out[fold], caches[fold] = y, c
    for a, b in zip(caches[True], caches[False]):
        if a is not None:
            exact(a, b)
    assert caches[True][0].dtype == TORCH_DTYPES[kv_dtype]
    if INTERPRETED:  # the same numbers in the same order
        exact(out[True], out[False])
    else:  # the GPU may contract q's rotation into other FMAs: q within an ulp
        close(out[True], out[False], dtype)
    # the inputs are left as they were: run again on the same tensors (as the autotuner does),
    # the same cache and output
    q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
    q, k, v = q.view(B, 1, H, D), k.view(B, 1, Hkv, D), v.view(B, 1, Hkv, D)
    before = qkv.clone()
    c = caches[True]
    again = da.decode_attention(q[:, 0], c[0], c[1], pos, c[2], c[3],
                                new_kv=(k[:, 0], v[:, 0], cos, sin))
    exact(qkv, before)
    exact(again, out[True])
    for a, b in zip(c, caches[False]):
        if a is not None:
            exact(a, b)
    with pytest.raises(ValueError, match=r"must be \[B, Hkv, D\]"):
        da.decode_attention(q[:, 0], c[0], c[1], pos, c[2], c[3], new_kv=(k, v, cos, sin))


@pytest.mark.gpu
def test_cold_timing_reads_the_weight_from_dram():
    """``kernels.graph_timing``: an 8 MB weight fits the L2; replayed back to back it is read
    from there, timed cold (after a read of 2.5x the L2, subtracted) from DRAM: slower. The
    autotuners' ``graph_bench`` times cold under ``switches.cold_tune``."""
    from kernels import graph_timing, switches

    w = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16)

    def fn():
        return gemv.gemv(x, w, config=gemv._FIXED)

    hot = graph_timing.time_ms(fn, cold=False)
    cold = graph_timing.time_ms(fn, cold=True)
    assert 0 < hot < cold, (hot, cold)
    with switches.use(cold_tune=True):
        t = graph_timing.graph_bench(fn, quantiles=[0.5, 0.2, 0.8])
    assert len(t) == 3 and t[0] > hot


@pytest.mark.gpu
@pytest.mark.parametrize("prologue", ["norm", "none", "swiglu"])
def test_every_dot_path_tile_agrees_with_the_reference(prologue):
    """Every tile of the autotuner's dot-path space (``_DOT``: 2-16 rows, split-K included),
    timed as the autotuner runs it (many calls on the same workspace), gives the reference's
    output at batch 12 on a Mistral-7B-like shape. On an H200 the tiles autotuned at runtime for
    batch 12 (all ``BLOCK_N`` 128, ``BLOCK_K`` 64, split-K 4 and 8) ended the held-out pairs'
    decode in non-finite logits, and never with ``autotune=False``
    (results/reference/heldout_h200/2026-11-25/probes)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    M, N, K = 12, 1536, 4096
    Kin = 2 * K if prologue == "swiglu" else K
    x = torch.randn(M, Kin, device="cuda", dtype=torch.bfloat16, generator=g)
    w = _w(N, K, torch.bfloat16, g)
    kw = {}
    if prologue == "norm":
        kw = dict(norm_weight=torch.rand(K, device="cuda", dtype=torch.bfloat16, generator=g)
                  + 0.5, residual=torch.randn(M, K, device="cuda", dtype=torch.bfloat16,
                                               generator=g))
    want = gemv.reference(x, w, None, prologue, eps=1e-5, **kw)
    want = want[0] if isinstance(want, tuple) else want
    bad = []
    for c in gemv._CONFIGS:
        cfg = {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
        if (cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"], c.num_warps,
                c.num_stages) not in gemv._DOT:
            continue
        for _ in range(20):
            got = gemv.gemv(x, w, None, prologue, eps=1e-5, config=cfg, **kw)
        got = got[0] if isinstance(got, tuple) else got
        err = (got.float() - want.float()).abs().max().item()
        if not torch.isfinite(got).all() or err > 0.05 * want.float().abs().max().item():
            bad.append((cfg, err))
    assert not bad, bad


@pytest.mark.parametrize("block_m,prologue", [(1, 1), (16, 1), (16, 0)])
def test_split_k_reads_its_sums_before_any_thread_zeroes_them(block_m, prologue):
    """The split-K epilogue, compiled for an H100/H200 (sm_90; no GPU needed): the column's last
    program loads the partial sums and sums of squares, then a CTA barrier, then zeroes them. The
    loads and the zeroing stores are laid out over different threads, so without the barrier one
    thread zeroed what another had not read: on an H200 15-23 of 135 dot-path tiles gave wrong
    outputs, the norm prologue's up to 400x (results/reference/gemv_sync_probe/)."""
    import re

    from tests.kernels.sm90 import sm90_ptx

    code = f"""
from kernels import gemv
k = gemv._gemv_kernel
sig = dict(zip(k.arg_names, ["*bf16"] * 7 + ["*fp32", "*fp32", "*i32", "i32", "i32", "i32",
                                               "fp32"] + ["i32"] * 5))
const = dict(PROLOGUE={prologue}, HAS_RES={prologue == 1}, HAS_BIAS=False, BLOCK_M={block_m},
             BLOCK_N=64, BLOCK_K=128, SPLIT_K=4, PREFETCH_X=0, W_AHEAD=0, PDL=False, TRIGGER=True,
             F32=False, IEEE=False)
ptx(k, sig, const, num_warps=4, num_stages=3)
"""
    ptx = sm90_ptx(code)[0].splitlines()
    count = next(i for i, ln in enumerate(ptx) if re.search(r"atom\.global\.\S*acq_rel", ln))
    tail = ptx[count:]
    loads = [i for i, ln in enumerate(tail) if "ld.global.cg" in ln]
    zeroes = [i for i, ln in enumerate(tail) if re.search(r"\bst\.global\.(v\d\.)?b32", ln)]
    assert loads and zeroes
    assert any(max(loads) < i < min(zeroes) for i, ln in enumerate(tail) if "bar.sync" in ln)


def test_the_dot_path_loads_no_activation_before_its_pdl_wait():
    """The dot path (2-16 rows) under PDL, compiled for an H100/H200 (sm_90; no GPU needed): no
    global load before ``griddepcontrol.wait`` (its activations' addresses depend on the wait:
    ``gemv._gdc_wait_dep``), ``griddepcontrol.launch_dependents`` after it, and none with
    ``TRIGGER`` off. A load before the wait reads the previous kernel's output before it is
    written (``bench.pdl_probe race``)."""
    import re

    from tests.kernels.sm90 import sm90_ptx

    code = """
from kernels import gemv
k = gemv._gemv_kernel
sig = dict(zip(k.arg_names, ["*bf16"] * 7 + ["*fp32", "*fp32", "*i32", "i32", "i32", "i32",
                                               "fp32"] + ["i32"] * 5))
for trigger in (True, False):
    const = dict(PROLOGUE=1, HAS_RES=True, HAS_BIAS=False, BLOCK_M=16, BLOCK_N=128, BLOCK_K=128,
                 SPLIT_K=4, PREFETCH_X=0, W_AHEAD=0, PDL=gemv.DOT_PDL, TRIGGER=trigger,
                 F32=False, IEEE=False)
    ptx(k, sig, const, num_warps=8, num_stages=4)
"""
    ptx, untriggered = sm90_ptx(code)
    wait = ptx.find("griddepcontrol.wait")
    assert wait > 0 and ptx.find("griddepcontrol.launch_dependents") > wait
    assert not re.findall(r"\b(ld\.global|cp\.async)", ptx[:wait])
    assert re.findall(r"\b(ld\.global|cp\.async)", ptx[wait:])
    # pdl_trigger=False (the qkv GEMV's): it waits, and lets the next kernel launch at its end
    assert "griddepcontrol.wait" in untriggered
    assert "griddepcontrol.launch_dependents" not in untriggered


@pytest.mark.gpu
@pytest.mark.parametrize("prologue", ["norm", "none", "swiglu"])
def test_the_dot_path_under_pdl_reads_what_the_kernel_before_it_wrote(prologue):
    """A producer lets its dependents launch at once, sleeps 300 us, then writes the GEMV's
    input over NaNs; the GEMV follows it with ``launch_pdl``, on the seed tiles
    (``gemv._SEEDS``) with and without ``W_AHEAD``: its output is the one computed after the
    producer finished. The control, a dependent that does not wait, reads NaN (the window is
    real). On an H200 a 768-wide design's decode logits were NaN under PDL on 2026-11-24."""
    from bench import pdl_probe as P

    if not gemv._pdl_cuda(torch.cuda.current_device()):
        pytest.skip("PDL needs compute capability >= 9")
    torch.manual_seed(0)
    M, N, K = 8, 1280, 768
    src = torch.randn(M, 2 * K if prologue == "swiglu" else K, device="cuda",
                      dtype=torch.bfloat16)
    x = torch.empty_like(src)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02
    nw = torch.ones(K, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    y, h = torch.empty(M, N, device="cuda", dtype=torch.bfloat16), torch.empty_like(r)
    ctl = torch.zeros_like(src)
    grid = (-(-src.numel() // 4096),)
    for a in (src, x):  # compiled first (with the same arguments' specialization), then timed
        P._produce(src, x)
        P._no_wait_copy[grid](a, ctl, src.numel(), BLOCK=4096, launch_pdl=True)
        torch.cuda.synchronize()
    assert not torch.isfinite(ctl.float()).all()
    bad = []
    for seed in gemv._SEEDS:
        for wa in (0, 1):
            cfg = {k: v for k, v in seed.items() if k != "PREFETCH_X"} | {"W_AHEAD": wa}
            x.copy_(src)
            P._gemv_launch(x, w, nw, r, y, h, prologue, cfg, 0)
            torch.cuda.synchronize()
            want = y.float().clone()
            for _ in range(2):  # the first compiles
                y.zero_()
                P._produce(src, x)
                P._gemv_launch(x, w, nw, r, y, h, prologue, cfg, gemv.DOT_PDL)
                torch.cuda.synchronize()
            if not torch.isfinite(y.float()).all() or (y.float() - want).abs().max() > 0.05:
                bad.append(cfg)
    assert not bad, bad
