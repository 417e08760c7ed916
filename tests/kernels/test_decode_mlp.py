"""The decode MLP block in one launch (``kernels.decode_mlp``) against its PyTorch reference:
odd widths, one and several rows, with and without the residual, split K in either GEMV; on the
GPU the one-launch path with its grid barrier, replayed in a CUDA graph."""

import pytest
import torch

from kernels import decode_mlp, gemv
from tests.kernels.conftest import DEVICE, DTYPES, exact
from tests.kernels.test_gemv import close_gemm

CONFIGS = [{"BN1": 32, "BK1": 32, "SK1": 1, "BN2": 16, "BK2": 64, "SK2": 2},
           {"BN1": 16, "BK1": 64, "SK1": 3, "BN2": 32, "BK2": 32, "SK2": 1}]


def _inputs(M, D, F, dtype, seed):
    g = torch.Generator(DEVICE).manual_seed(seed)
    x = torch.randn(1, M, D, device=DEVICE, dtype=dtype, generator=g)
    r = torch.randn(1, M, D, device=DEVICE, dtype=dtype, generator=g)
    nw = 1 + 0.1 * torch.randn(D, device=DEVICE, dtype=dtype, generator=g)
    w13 = (torch.randn(2 * F, D, device=DEVICE, dtype=dtype, generator=g) / D**0.5).to(dtype)
    w2 = (torch.randn(D, F, device=DEVICE, dtype=dtype, generator=g) / F**0.5).to(dtype)
    return x, r, nw, w13, w2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,D,F", [(1, 80, 96), (3, 64, 200), (16, 48, 40)])
@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
def test_decode_mlp_matches_the_two_gemvs(M, D, F, dtype, cfg):
    x, r, nw, w13, w2 = _inputs(M, D, F, dtype, M * 7 + D + F + cfg)
    y, h = decode_mlp.decode_mlp(x, r, nw, w13, w2, 1e-5, CONFIGS[cfg])
    assert y.shape == (1, M, D) and h.shape == (1, M, D)
    exact(h, decode_mlp.reference(x, r, nw, w13, w2, 1e-5)[1])
    close_gemm(y, _two_gemvs(x, r, nw, w13, w2), dtype)
    # called again: the workspaces and counters were left zeroed
    y2 = decode_mlp.decode_mlp(x, None, nw, w13, w2, 1e-5, CONFIGS[cfg])
    close_gemm(y2, _two_gemvs(x, None, nw, w13, w2), dtype)


def _two_gemvs(x, r, nw, w13, w2):
    """The two launches the kernel replaces (``kernels.gemv``, itself tested against the
    reference): the oracle of the same numerics (a chain of two GEMMs against the torch
    reference moves by the first one's rounding times the second's weights)."""
    gu = gemv.gemv(x, w13, None, "norm", nw, 1e-5, r)
    return gemv.gemv(gu[0] if r is not None else gu, w2, None, "swiglu")


def test_decode_mlp_refuses_bad_shapes():
    x, r, nw, w13, w2 = _inputs(1, 32, 48, torch.float32, 0)
    with pytest.raises(ValueError, match="do not fit"):
        decode_mlp.decode_mlp(x, r, nw, w13[:-1], w2, 1e-5)
    with pytest.raises(ValueError, match="at most 16 rows"):
        decode_mlp.decode_mlp(torch.zeros(17, 32, dtype=torch.float32, device=DEVICE), None, nw,
                              w13, w2, 1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="the grid barrier runs on the GPU")
@pytest.mark.parametrize("M", [1, 8])
@pytest.mark.parametrize("pdl", [False, True])
def test_decode_mlp_one_launch_in_a_graph(M, pdl):
    """The one-launch path (grid barrier, L2 prefetch) replayed in a CUDA graph on new inputs:
    the same output as the two-launch path, and the barrier reset for the next replay."""
    if pdl and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("PDL needs Hopper")
    D, F = 2048, 8192
    x, r, nw, w13, w2 = _inputs(M, D, F, torch.bfloat16, M)
    cfg = {"BN1": 128, "BK1": 128, "SK1": 1, "BN2": 128, "BK2": 128, "SK2": 8, "num_warps": 8,
           "num_stages": 3}
    want = decode_mlp.decode_mlp(x, r, nw, w13, w2, 1e-5, cfg, phases=2)
    run = lambda: decode_mlp.decode_mlp(x, r, nw, w13, w2, 1e-5, cfg, pdl=pdl)  # noqa: E731
    run()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run()
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        want = decode_mlp.decode_mlp(x, r, nw, w13, w2, 1e-5, cfg, phases=2)
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out[1], want[1], rtol=0, atol=0)
        torch.testing.assert_close(out[0].float(), want[0].float(), rtol=2e-2, atol=2e-2)
