"""The L2 prefetch launch: refuses bad input, is a no-op without a GPU, and under PDL its end
still waits for the kernel before it (a consumer after it never reads early)."""

import pytest
import torch

from kernels import gemv
from kernels.l2_prefetch import prefetch_l2


def test_bad_input_is_refused(device):
    w = torch.randn(64, 32, device=device)
    with pytest.raises(ValueError, match="contiguous"):
        prefetch_l2(w.t())
    with pytest.raises(ValueError, match="nbytes"):
        prefetch_l2(w, nbytes=w.nbytes + 1)
    with pytest.raises(ValueError, match="nbytes"):
        prefetch_l2(w, nbytes=-1)


def test_leaves_the_tensor_as_it_was(device):
    w = torch.randn(300, 77, device=device, dtype=torch.bfloat16)
    before = w.clone()
    prefetch_l2(w)
    prefetch_l2(w, nbytes=1000)  # a part, not a whole number of lines
    if device == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(w, before)


@pytest.mark.gpu
def test_under_pdl_the_next_kernel_waits_for_the_one_before(device):
    if not gemv.pdl_supported(torch.device(device)):
        pytest.skip("no programmatic dependent launch on this GPU")
    from bench.pdl_probe import _slow_copy  # lets the next kernel launch, writes 200 us late
    torch.manual_seed(0)
    src = torch.randn(8, 2048, device=device, dtype=torch.bfloat16)
    x = torch.empty_like(src)
    w = torch.randn(2048, 2048, device=device, dtype=torch.bfloat16) * 0.02
    ref = (src.float() @ w.float().t())
    for _ in range(3):
        x.fill_(float("nan"))
        _slow_copy[(4,)](src, x, src.numel(), NS=200_000, BLOCK=4096)
        prefetch_l2(w, pdl=True)  # launched at once; must end only after the copy
        y = gemv.gemv(x, w, pdl=True)  # waits for the prefetch launch only
        torch.cuda.synchronize()
        assert torch.isfinite(y).all()
        torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=2e-2)
