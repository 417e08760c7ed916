"""Latent attention's RoPE, latent norm and cache write in one launch (``kernels.mla_rope``) against
its PyTorch reference: the query's RoPE parts rotated in place (interleaved pairs), the latent
normed and the RoPE key rotated into the cache at the tokens' positions, nothing else written."""

import pytest
import torch

from kernels.mla_rope import mla_rope_write_, reference
from tests.kernels.conftest import DTYPES, close


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,H,nope,R,r,start", [(2, 1, 3, 16, 8, 24, 11), (1, 5, 20, 8, 16, 40, 0),
                                                  (3, 2, 16, 32, 64, 48, 30)])
def test_matches_the_reference(B, T, H, nope, R, r, start, dtype, device):
    g = torch.Generator(device).manual_seed(B * 100 + T)
    S = 40
    qbuf = torch.randn(B, T, H * (nope + R), device=device, dtype=dtype, generator=g)
    kv = torch.randn(B, T, r + R + 5, device=device, dtype=dtype, generator=g)[..., : r + R]
    w = torch.rand(r, device=device, dtype=dtype, generator=g) + 0.5
    cos = torch.rand(S, R, device=device, generator=g) * 2 - 1
    sin = torch.rand(S, R, device=device, generator=g) * 2 - 1
    pos = torch.arange(start, start + T, device=device) % S
    caches = [(torch.full((B, 1, S, r), 7.0, device=device, dtype=dtype),
               torch.full((B, 1, S, R), 7.0, device=device, dtype=dtype)) for _ in range(2)]
    qs = [qbuf.clone().view(B, T, H, nope + R) for _ in range(2)]
    mla_rope_write_(qs[0], kv, w, 1e-6, cos, sin, pos, *caches[0], nope)
    reference(qs[1], kv, w, 1e-6, cos, sin, pos, *caches[1], nope)
    close(qs[0], qs[1], dtype)
    assert torch.equal(qs[0][..., :nope], qbuf.view(B, T, H, nope + R)[..., :nope])
    for got, want in zip(caches[0], caches[1]):
        close(got, want, dtype)
        untouched = torch.ones(S, dtype=torch.bool, device=device)
        untouched[pos] = False
        assert (got[:, :, untouched] == 7.0).all()  # only the tokens' positions written


def test_refuses_shapes_that_do_not_agree():
    q = torch.zeros(1, 1, 2, 24)
    with pytest.raises(ValueError, match="do not agree"):
        mla_rope_write_(q, torch.zeros(1, 1, 30), torch.ones(16), 1e-6, torch.zeros(8, 8),
                        torch.zeros(8, 8), torch.tensor([0]), torch.zeros(1, 1, 8, 16),
                        torch.zeros(1, 1, 8, 8), 16)
    q2 = torch.zeros(1, 1, 2, 24)
    with pytest.raises(ValueError, match="contiguous"):
        mla_rope_write_(q2, torch.zeros(1, 1, 24), torch.ones(16), 1e-6, torch.zeros(8, 8),
                        torch.zeros(8, 16)[:, ::2], torch.tensor([0]), torch.zeros(1, 1, 8, 16),
                        torch.zeros(1, 1, 8, 8), 16)
