"""The per-head GEMV of latent attention's absorbed decode (``kernels.head_gemv``) against its
PyTorch reference: one row and several (the CUDA-core and the ``tl.dot`` paths), rows past one
program's 16, widths that are no power of two, both weight layouts read as views of a stacked
weight (``W_UK`` and ``W_UV`` of ``wkv_b``), an output written into a strided view."""

import pytest
import torch

from kernels.head_gemv import head_gemv, reference
from tests.kernels.conftest import DEVICE, DTYPES, close


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,K,N", [(1, 3, 40, 24), (2, 5, 16, 48), (17, 2, 24, 20)])
@pytest.mark.parametrize("transposed", [False, True])
def test_matches_the_reference(B, H, K, N, transposed, dtype, device):
    g = torch.Generator(device).manual_seed(B * 100 + K + transposed)
    x = torch.randn(B, H, K, device=device, dtype=dtype, generator=g)
    # the weight a view of a stacked one, as W_UK / W_UV are of wkv_b's
    rows = (N, K) if transposed else (K, N)
    stacked = torch.randn(H, rows[0] + 8, rows[1], device=device, dtype=dtype, generator=g) / K**0.5
    w = stacked[:, 8:]
    got = head_gemv(x, w, transposed=transposed)
    assert got.shape == (B, H, N) and got.dtype == dtype
    close(got, reference(x, w, transposed), dtype)


def test_writes_into_a_strided_output_and_reads_strided_rows():
    """``x`` a ``[H, B, K]`` buffer seen as ``[B, H, K]``; ``out`` a slice of a wider buffer."""
    g = torch.Generator(DEVICE).manual_seed(3)
    B, H, K, N = 4, 3, 32, 16
    x = torch.randn(H, B, K, device=DEVICE, generator=g).transpose(0, 1)
    w = torch.randn(H, K, N, device=DEVICE, generator=g)
    buf = torch.zeros(B, H, N + 5, device=DEVICE)
    out = buf[:, :, 5:]
    head_gemv(x, w, out=out)
    close(out, reference(x, w), torch.float32)
    assert buf[:, :, :5].abs().max() == 0  # nothing written outside the view


def test_refuses_shapes_that_do_not_agree():
    x = torch.randn(2, 3, 8, device=DEVICE)
    with pytest.raises(ValueError, match="do not agree"):
        head_gemv(x, torch.randn(3, 9, 4, device=DEVICE))
    with pytest.raises(ValueError, match="contiguous"):
        head_gemv(x, torch.randn(3, 8, 4, device=DEVICE),
                  out=torch.empty(2, 3, 8, device=DEVICE)[:, :, ::2])


def test_the_kernel_lists_choice_is_the_models():
    """``zoo.attn``'s rule (the torch-free kernel list's: ``HEAD_GEMV_ROWS``,
    ``HEAD_GEMV_MANY``) is ``kernels.head_gemv.per_head_gemv``, which ``zoo.mla_attention``
    runs, at every batch and head count around its limits."""
    from kernels.head_gemv import per_head_gemv
    from zoo.attn import HEAD_GEMV_MANY, HEAD_GEMV_ROWS

    for B in (1, 2, 8, 16, 17, 64):
        for H in (1, 16, 63, 64, 128):
            want = B <= HEAD_GEMV_ROWS and (B > 1 or H < HEAD_GEMV_MANY)
            assert per_head_gemv(B, H) == want, (B, H)
    assert per_head_gemv(1, 16) and not per_head_gemv(1, 128) and not per_head_gemv(17, 16)
