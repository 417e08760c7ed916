"""Decode attention (bf16/fp16/fp32 and int8/fp8 caches) and the quantize-on-write kernel."""

import pytest
import torch

from kernels import decode_attention as da
from kernels import kv_quant
from kernels.split_merge import plan_splits
from tests.kernels.conftest import DTYPES, INTERPRETED, close, exact

SHAPES = [  # B, H, Hkv, D, S (cache capacity), kv_len
    (1, 32, 8, 64, 300, 257),
    (2, 8, 8, 80, 130, 130),
    (3, 12, 4, 96, 77, 5),
    (1, 4, 1, 128, 200, 199),
    (2, 4, 2, 256, 64, 64),
]


def _inputs(B, H, Hkv, D, S, dtype, device, seed):
    g = torch.Generator(device).manual_seed(seed)
    q = torch.randn(B, H, D, device=device, dtype=dtype, generator=g)
    k = torch.randn(B, Hkv, S, D, device=device, dtype=dtype, generator=g)
    v = torch.randn(B, Hkv, S, D, device=device, dtype=dtype, generator=g)
    return q, k, v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,Hkv,D,S,kv_len", SHAPES)
def test_decode_attention(B, H, Hkv, D, S, kv_len, dtype, device):
    q, k, v = _inputs(B, H, Hkv, D, S, dtype, device, seed=kv_len)
    pos = torch.tensor([kv_len - 1], device=device)
    got = da.decode_attention(q, k, v, pos)
    want = da.reference(q, k, v, kv_len)
    tol_dtype = torch.bfloat16 if dtype == torch.float32 else dtype  # tl.dot in tf32 on GPU
    close(got, want, tol_dtype if device == "cuda" else dtype)
    # positions past kv_len must not matter: poison them
    k[:, :, kv_len:] = float("nan")
    v[:, :, kv_len:] = float("nan")
    assert torch.equal(da.decode_attention(q, k, v, pos), got)


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
@pytest.mark.parametrize("B,Hkv,T,D", [(2, 4, 3, 64), (1, 2, 1, 96), (3, 1, 5, 128)])
def test_quantize_on_write(kv_dtype, B, Hkv, T, D, device):
    from zoo.cache import TORCH_DTYPES

    if INTERPRETED and kv_dtype == "fp8_e4m3":
        pytest.skip("the Triton interpreter's fp32 -> fp8e4nv conversion does not round like the "
                    "GPU (seen: 100 -> 104 where torch and the hardware give 96, and errors of "
                    "several ulps); the fp8 write is checked on the GPU, the fp8 read below")

    S = 16
    g = torch.Generator(device).manual_seed(D * T)
    x = torch.randn(B, T, Hkv, D, device=device, dtype=torch.bfloat16, generator=g)
    x = x.transpose(1, 2)  # [B, Hkv, T, D], strided like the model's k/v
    pos = torch.tensor([7, 2, 11, 0, 15][:T], device=device)
    out = torch.zeros(B, Hkv, S, D, device=device, dtype=TORCH_DTYPES[kv_dtype])
    scale = torch.full((B, Hkv, S), -1.0, device=device)
    kv_quant.quantize_kv(x, out, scale, pos, kv_dtype)
    want_q, want_s = kv_quant.reference(x, kv_dtype)
    torch.testing.assert_close(scale[:, :, pos], want_s, rtol=1e-6, atol=0)
    exact(out[:, :, pos], want_q)
    untouched = torch.ones(S, dtype=torch.bool)
    untouched[pos.cpu()] = False
    assert (scale[:, :, untouched.to(device)] == -1).all()
    # dequantized values are close to the input: error within half a quantization step
    deq = out[:, :, pos].float() * scale[:, :, pos, None]
    step = scale[:, :, pos, None] * (1.0 if kv_dtype == "int8" else 32.0)
    assert ((deq - x.float()).abs() <= 0.5 * step + 1e-6).all()


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
@pytest.mark.parametrize("B,H,Hkv,D,S,kv_len", SHAPES[:4])
def test_decode_attention_quantized_cache(kv_dtype, B, H, Hkv, D, S, kv_len, device):
    q, k, v = _inputs(B, H, Hkv, D, S, torch.bfloat16, device, seed=S)
    # the cache is written by the torch reference quantizer: this test checks the read path
    (kq, ks), (vq, vs) = kv_quant.reference(k, kv_dtype), kv_quant.reference(v, kv_dtype)
    pos = torch.tensor([kv_len - 1], device=device)
    got = da.decode_attention(q, kq, vq, pos, k_scale=ks, v_scale=vs)
    want = da.reference(q, kq, vq, kv_len, k_scale=ks, v_scale=vs)
    close(got, want, torch.bfloat16)
    # against the unquantized cache: relative error of the order of the format's rounding
    # (int8: 1/254 of the row's max; fp8 e4m3: 3 mantissa bits, rms ~ 2^-4 / sqrt(3) = 3.6%)
    ref = da.reference(q, k, v, kv_len).float()
    rel = ((got.float() - ref).norm() / ref.norm()).item()
    assert rel < (0.02 if kv_dtype == "int8" else 0.06), rel


@pytest.mark.gpu
def test_decode_attention_autotuned(device):
    from kernels import switches

    with switches.use(autotune=True):
        _autotuned(device)


def _autotuned(device):
    for kvd in (None, "int8"):
        q, k, v = _inputs(4, 32, 8, 128, 1000, torch.bfloat16, device, seed=5)
        pos = torch.tensor([900], device=device)
        if kvd:
            (k, ks), (v, vs) = kv_quant.reference(k, kvd), kv_quant.reference(v, kvd)
            got = da.decode_attention(q, k, v, pos, ks, vs)
            want = da.reference(q, k, v, 901, ks, vs)
        else:
            got, want = da.decode_attention(q, k, v, pos), da.reference(q, k, v, 901)
        close(got, want, torch.bfloat16)


def test_split_plan_covers_the_cache():
    for B, Hkv, S, bn, sm in [(1, 8, 640, 64, 132), (64, 8, 8224, 64, 132), (1, 1, 5, 64, 4)]:
        n, length = plan_splits(B, Hkv, S, bn, sm)
        assert length % bn == 0 and n * length >= S and (n - 1) * length < S


def test_one_byte_split_plan_aims_at_one_wave():
    """A one-byte cache's splits (``decode_attention.plan``, 132 SMs): about one wave of programs
    at head_dim 64, half at 128, to the nearest whole split (the H100's fastest of 2 / 4 / 8 / 16
    programs a SM, decode_levers_h100.md section 19); where one split a (sequence, KV head) is
    that already, more splits (``PER_SM_FILL``); bf16's plan as before (2 a SM, ceil)."""
    want = {(8, 32, 64): 2, (8, 16, 64): 5, (8, 8, 64): 9, (8, 8, 128): 5, (64, 8, 64): 5,
            (8, 1, 64): 17, (1, 8, 128): 17}
    for (B, Hkv, D), n in want.items():
        cap = 8256 if B == 64 else 4160
        got, length, _ = da.plan(B, Hkv, 32 // Hkv, D, cap, True, 132)
        assert got == n and length % 256 == 0 and (got - 1) * length < cap <= got * length, (
            B, Hkv, D, got)
    assert [da.plan(8, h, 32 // h, 64, 4160, False, 132)[0] for h in (1, 8, 32)] == [33, 5, 2]
    assert da.plan(8, 8, 4, 64, 4160, True, 132)[0] != da.plan(8, 8, 4, 128, 4160, True, 132)[0]


@pytest.mark.skipif(not INTERPRETED, reason="the probe's GPU run checks its own errors")
@pytest.mark.parametrize("qk8,pv8,tol", [(False, False, 0.004), (True, False, 0.008),
                                         (True, True, 0.016)])
def test_qk8_probe_kernel_attends_like_the_reference(qk8, pv8, tol):
    """``bench.qk8_probe``'s kernel over an int8 cache: both switches off, what the shipped kernel
    computes (bf16 rounding); with q (and p) quantized per row to int8 for the one-byte products,
    within the tolerance their rounding allows (odd groups, a split past the position)."""
    from bench.qk8_probe import qk8_attention
    g = torch.Generator().manual_seed(3)
    B, H, Hkv, D, S, p = 2, 12, 4, 64, 300, 250
    q = torch.randn(B, H, D, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(B, Hkv, S, D, generator=g).to(torch.bfloat16) for _ in range(2))
    (k8, ks), (v8, vs) = kv_quant.reference(k, "int8"), kv_quant.reference(v, "int8")
    want = da.reference(q, k8, v8, p + 1, ks, vs).float()
    got = qk8_attention(q, k8, v8, torch.tensor([p]), ks, vs, qk8=qk8, pv8=pv8).float()
    assert (got - want).abs().max().item() < tol
