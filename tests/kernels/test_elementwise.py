"""RMSNorm(+residual), SwiGLU and RoPE kernels against their PyTorch references."""

import pytest
import torch

from kernels import rmsnorm, rope, swiglu
from tests.kernels.conftest import DTYPES, close, exact


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,d", [(1, 128), (3, 1000), (17, 4096), (5, 127)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rmsnorm(rows, d, dtype, with_residual, device):
    g = torch.Generator(device).manual_seed(rows * d)
    x = torch.randn(rows, d, device=device, dtype=dtype, generator=g)
    w = 1 + 0.1 * torch.randn(d, device=device, dtype=dtype, generator=g)
    r = torch.randn(rows, d, device=device, dtype=dtype, generator=g) if with_residual else None
    got = rmsnorm.rmsnorm(x, w, 1e-5, residual=r)
    want = rmsnorm.reference(x, w, 1e-5, residual=r)
    if with_residual:
        close(got[0], want[0], dtype)
        exact(got[1], want[1])  # the add is exact
    else:
        close(got, want, dtype)


def test_rmsnorm_matches_zoo_module(device):
    from zoo.norms import RMSNorm

    m = RMSNorm(640, 1e-6).to(device)
    with torch.no_grad():
        m.weight.normal_()
    x = torch.randn(2, 7, 640, device=device)
    close(rmsnorm.rmsnorm(x, m.weight, 1e-6), m(x), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,f", [(1, 352), (4, 2731), (9, 14336)])
def test_swiglu(rows, f, dtype, device):
    h = torch.randn(rows, 2 * f, device=device, dtype=dtype,
                    generator=torch.Generator(device).manual_seed(f))
    close(swiglu.swiglu(h), swiglu.reference(h), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,H,Hkv,D", [(1, 1, 32, 8, 64), (2, 5, 4, 4, 80), (3, 2, 6, 1, 96),
                                         (1, 3, 2, 2, 256)])
def test_rope_inplace_on_qkv_views(B, T, H, Hkv, D, dtype, device):
    from zoo import ModelConfig
    from zoo.rope_tables import rope_cache

    cfg = ModelConfig.from_name("tiny", head_dim=D)
    cos, sin = rope_cache(cfg, 64, device)
    g = torch.Generator(device).manual_seed(D + T)
    qkv = torch.randn(B, T, (H + 2 * Hkv) * D, device=device, dtype=dtype, generator=g)
    q, k, _ = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
    q, k = q.view(B, T, H, D), k.view(B, T, Hkv, D)
    pos = torch.randperm(60, device="cpu", generator=torch.Generator().manual_seed(T))[:T]
    pos = pos.to(device)
    # float32 reference on the same inputs, tables rounded to the activation dtype as the zoo does
    c32, s32 = cos.to(dtype).float(), sin.to(dtype).float()
    want_q, want_k = rope.reference(q.float(), k.float(), c32, s32, pos)
    v_before = qkv[..., (H + Hkv) * D:].clone()
    rope.rope_(q, k, cos, sin, pos)  # in place on the views
    close(q, want_q, dtype)
    close(k, want_k, dtype)
    assert torch.equal(qkv[..., (H + Hkv) * D:], v_before)  # v untouched
