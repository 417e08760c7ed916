"""Decode attention over a local layer's ring (a sliding window) and with attention sinks."""

import pytest
import torch

from kernels import decode_attention as da
from tests.kernels.conftest import DTYPES, close


def _full(B, Hkv, P, D, dtype, device, seed):
    g = torch.Generator(device).manual_seed(seed)
    k = torch.randn(B, Hkv, P + 1, D, device=device, dtype=dtype, generator=g)
    v = torch.randn(B, Hkv, P + 1, D, device=device, dtype=dtype, generator=g)
    return k, v


def _ring(k, W):
    """The ring of ``W`` slots holding the last ``W`` positions of ``k [B, Hkv, P + 1, D]`` at
    ``p % W`` (slots never written stay NaN: they must not be read)."""
    B, Hkv, n, D = k.shape
    r = torch.full((B, Hkv, W, D), float("nan"), device=k.device, dtype=k.dtype)
    for p in range(max(0, n - W), n):
        r[:, :, p % W] = k[:, :, p]
    return r


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,Hkv,D,W,P", [(1, 8, 2, 64, 48, 20), (2, 4, 1, 64, 48, 47),
                                           (1, 8, 8, 32, 48, 48), (2, 6, 2, 64, 40, 130)])
def test_ring_reads_the_window(B, H, Hkv, D, W, P, dtype, device):
    """Over a ring of ``W`` slots, the token at position ``P`` attends to positions
    ``max(0, P - W + 1) .. P`` (transformers' sliding window), whatever the slots' order."""
    k, v = _full(B, Hkv, P, D, dtype, device, seed=P)
    q = torch.randn(B, H, D, device=device, dtype=dtype,
                    generator=torch.Generator(device).manual_seed(1000 + P))
    pos = torch.tensor([P], device=device)
    got = da.decode_attention(q, _ring(k, W), _ring(v, W), pos)
    lo = max(0, P - W + 1)
    want = da.reference(q, k[:, :, lo:], v[:, :, lo:], P + 1 - lo)
    close(got, want, torch.bfloat16 if (dtype == torch.float32 and device == "cuda") else dtype)


@pytest.mark.parametrize("P", [5, 47, 48, 101])
def test_ring_folded_write(P, device):
    """With the step's RoPE and cache write folded in, a ring takes the new token at slot
    ``P % W`` and attends as the same step over a cache of every position does."""
    B, H, Hkv, D, W, dtype = 2, 8, 2, 64, 48, torch.bfloat16
    k, v = _full(B, Hkv, P, D, dtype, device, seed=P)
    g = torch.Generator(device).manual_seed(1000 + P)  # the draws of this case, whatever ran before
    q = torch.randn(B, H, D, device=device, dtype=dtype, generator=g)
    kn = torch.randn(B, Hkv, D, device=device, dtype=dtype, generator=g)
    vn = torch.randn(B, Hkv, D, device=device, dtype=dtype, generator=g)
    ang = torch.rand(P + 1, D // 2, device=device, generator=g) * 6.28
    cos = torch.cat([ang.cos(), ang.cos()], -1).contiguous()
    sin = torch.cat([ang.sin(), ang.sin()], -1).contiguous()
    pos = torch.tensor([P], device=device)
    full_k, full_v = k.clone(), v.clone()
    ring_k, ring_v = _ring(k, W), _ring(v, W)
    full = da.decode_attention(q, full_k, full_v, pos, new_kv=(kn, vn, cos, sin))
    got = da.decode_attention(q, ring_k, ring_v, pos, new_kv=(kn, vn, cos, sin))
    # the full cache's attention restricted to the window, q rotated as the kernel rotates it
    c, s = cos[P].to(dtype).float(), sin[P].to(dtype).float()
    q1, q2 = q.float().chunk(2, -1)
    q_rot = (q.float() * c + torch.cat([-q2, q1], -1) * s).to(dtype)
    lo = max(0, P - W + 1)
    want = da.reference(q_rot, full_k[:, :, lo:], full_v[:, :, lo:], P + 1 - lo)
    if not lo:
        close(full, got, dtype)
    torch.testing.assert_close(ring_k[:, :, P % W], full_k[:, :, P], rtol=0, atol=0)
    torch.testing.assert_close(ring_v[:, :, P % W], full_v[:, :, P], rtol=0, atol=0)
    close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,Hkv,D,S,kv_len", [(1, 8, 2, 64, 300, 257), (2, 4, 4, 32, 64, 1),
                                                (2, 16, 1, 64, 200, 150)])
def test_sinks(B, H, Hkv, D, S, kv_len, dtype, device):
    """A sink logit per query head joins the softmax's denominator (gpt-oss): against the
    reference's sink column; large sinks take most of the mass, so the output shrinks."""
    k, v = _full(B, Hkv, S - 1, D, dtype, device, seed=S)
    q = torch.randn(B, H, D, device=device, dtype=dtype,
                    generator=torch.Generator(device).manual_seed(1000 + S))
    sinks = torch.linspace(-2.0, 6.0, H, device=device, dtype=dtype)
    pos = torch.tensor([kv_len - 1], device=device)
    got = da.decode_attention(q, k, v, pos, sinks=sinks)
    want = da.reference(q, k, v, kv_len, sinks=sinks)
    close(got, want, torch.bfloat16 if (dtype == torch.float32 and device == "cuda") else dtype)
    plain = da.decode_attention(q, k, v, pos)
    assert not torch.allclose(got.float(), plain.float(), rtol=1e-2, atol=1e-2)
