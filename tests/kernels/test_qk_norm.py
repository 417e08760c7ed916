"""QK-norm in one launch (``kernels.qk_norm``) against its PyTorch reference: over the whole
projection and per head, HF's and Gemma's scale, one row (v left as the slice) and several (v
copied dense), rows at the qkv output's stride; the zoo's norms agree with the reference."""

import pytest
import torch

from kernels import qk_norm as K
from tests.kernels.conftest import DEVICE, DTYPES, TOL


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,H,Hkv,D,head,one_p", [(1, 4, 2, 16, False, False),
                                                     (5, 4, 2, 16, False, False),
                                                     (1, 4, 1, 32, True, False),
                                                     (6, 8, 2, 16, True, True),
                                                     (3, 3, 3, 24, False, True)])
def test_qk_norm_matches_the_reference(dtype, rows, H, Hkv, D, head, one_p):
    g = torch.Generator().manual_seed(rows * H + D)
    q_dim, kv_dim = H * D, Hkv * D
    big = torch.randn(rows, 2, q_dim + 2 * kv_dim, generator=g).to(DEVICE, dtype)
    qkv = big[:, 0]  # rows strided by twice their width, as a slice of a wider output
    wq = (1 + 0.1 * torch.randn(D if head else q_dim, generator=g)).to(DEVICE, dtype)
    wk = (1 + 0.1 * torch.randn(D if head else kv_dim, generator=g)).to(DEVICE, dtype)
    got = K.qk_norm(qkv, q_dim, kv_dim, wq, wk, 1e-6, D if head else 0, one_p)
    want = K.reference(qkv, q_dim, kv_dim, wq, wk, 1e-6, D if head else 0, one_p)
    rtol, atol = TOL[dtype]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    assert got[0].is_contiguous() and got[1].is_contiguous()
    assert got[2].is_contiguous() or rows == 1
    forced = K.qk_norm(qkv, q_dim, kv_dim, wq, wk, 1e-6, D if head else 0, one_p, copy_v=True)
    assert forced[2].untyped_storage().data_ptr() != qkv.untyped_storage().data_ptr()
    assert torch.equal(forced[2], want[2])


def test_the_reference_is_the_zoos_norms():
    """``reference`` computes what ``zoo.norms.RMSNorm`` / ``RMSNorm1p`` give on the split."""
    from zoo.norms import RMSNorm, RMSNorm1p

    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(3, 2, 64 + 2 * 32, generator=g)
    for cls, one_p in ((RMSNorm, False), (RMSNorm1p, True)):
        qn, kn = cls(16, 1e-6), cls(16, 1e-6)
        with torch.no_grad():
            qn.weight.normal_(generator=g)
            kn.weight.normal_(generator=g)
        q, k, v = qkv.split([64, 32, 32], dim=-1)
        want_q = qn(q.unflatten(-1, (4, 16))).flatten(-2)
        want_k = kn(k.unflatten(-1, (2, 16))).flatten(-2)
        got = K.reference(qkv, 64, 32, qn.weight, kn.weight, 1e-6, 16, one_p)
        torch.testing.assert_close(got[0], want_q)
        torch.testing.assert_close(got[1], want_k)
        assert torch.equal(got[2], v)


def test_bad_widths_are_refused():
    qkv = torch.zeros(1, 40, device=DEVICE)
    with pytest.raises(ValueError, match="q_dim \\+ 2 kv_dim"):
        K.qk_norm(qkv, 16, 8, torch.ones(16), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="heads of 6"):
        K.qk_norm(qkv, 24, 8, torch.ones(6), torch.ones(6), 1e-6, head_dim=6)
