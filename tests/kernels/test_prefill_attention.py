"""The prefill attention kernel of local and sink layers (``kernels.prefill_attention``) against
its PyTorch reference (``zoo.gqa.blocked``): windows shorter and longer than a tile, GQA groups,
sinks, a prompt that is no multiple of a tile, views of a qkv projection as inputs."""

import pytest
import torch

from kernels.prefill_attention import prefill_attention
from tests.kernels.conftest import DEVICE, DTYPES, close
from zoo import gqa

# (B, H, Hkv, T, D, window, sinks): the interpreter runs every program one by one, so its shapes
# are small; small tiles make several tiles per prompt and put the window's edges inside tiles
CASES = [(1, 4, 2, 37, 16, 8, False), (2, 4, 1, 40, 32, None, True), (1, 6, 2, 50, 16, 17, True),
         (1, 2, 2, 33, 16, 1, False), (2, 8, 2, 64, 16, 100, True)]
SMALL = (16, 16, 4, 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,Hkv,T,D,window,sinks", CASES)
def test_matches_the_reference(B, H, Hkv, T, D, window, sinks, dtype, device):
    g = torch.Generator(device).manual_seed(T)
    qkv = torch.randn(B, T, (H + 2 * Hkv) * D, device=device, dtype=dtype, generator=g)
    q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)  # strided views, as the model's
    q = q.view(B, T, H, D).transpose(1, 2)
    k = k.view(B, T, Hkv, D).transpose(1, 2)
    v = v.view(B, T, Hkv, D).transpose(1, 2)
    s = torch.randn(H, device=device, generator=g) if sinks else None
    got = prefill_attention(q, k, v, window=window, sinks=s, tile=SMALL if DEVICE == "cpu" else None)
    want = gqa.blocked(q.float(), k.float(), v.float(), window, s)
    close(got, want, dtype)
    assert got.transpose(1, 2).is_contiguous()


def test_a_window_below_one_is_refused():
    q = torch.zeros(1, 2, 4, 16)
    with pytest.raises(ValueError, match="window must be >= 1"):
        prefill_attention(q, q, q, window=0)
    with pytest.raises(ValueError, match="do not agree"):
        prefill_attention(q, q[:, :, :3], q[:, :, :3])
