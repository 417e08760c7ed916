"""The decode MoE down projection with the slots summed (``kernels.moe_down_sum``) against its
reference and against the grouped path it would replace (``moe_down`` then the torch sum)."""

import pytest
import torch

from kernels import moe_down_sum as ds
from kernels import moe_gemm as moe
from tests.kernels.conftest import DEVICE
from tests.kernels.test_moe_gemm import _case


@pytest.mark.parametrize("M,d,F,E,k", [(1, 32, 24, 4, 2), (2, 40, 72, 8, 3), (3, 16, 300, 6, 6),
                                       (1, 33, 64, 5, 1)])
def test_matches_the_reference_and_the_grouped_path(M, d, F, E, k):
    h, w13, w2, w, idx = _case(M, d, F, E, k, seed=M + k)
    tile = moe.tiles(M * k, E)
    act = moe.moe_up(h, w13, k, moe.align(idx, E, tile[0]), tile)
    got = ds.down_sum(act, w2, w, idx)
    assert got.shape == (M, d) and got.dtype == h.dtype
    torch.testing.assert_close(got, ds.reference(act, w2, w, idx), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, moe.moe_experts(h, w13, w2, w, idx), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got, moe.reference(h, w13, w2, w, idx), rtol=1e-4, atol=1e-4)


def test_a_token_whose_choices_repeat_an_expert_adds_both():
    h, w13, w2, w, _ = _case(1, 32, 24, 4, 2, seed=3)
    idx = torch.tensor([[1, 1]], device=DEVICE)
    act = torch.randn(2, 24, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    torch.testing.assert_close(ds.down_sum(act, w2, w, idx), ds.reference(act, w2, w, idx),
                               rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_refused():
    _, _, w2, w, idx = _case(2, 32, 24, 4, 2)
    with pytest.raises(ValueError, match=r"act must be \[M k, Fe\]"):
        ds.down_sum(torch.zeros(3, 24, device=DEVICE), w2, w, idx)
    with pytest.raises(ValueError, match=r"weights must be \[M, k\]"):
        ds.down_sum(torch.zeros(4, 24, device=DEVICE), w2, w[:1], idx)


@pytest.mark.gpu
def test_bf16_decode_shape_on_the_gpu():
    h, w13, w2, w, idx = _case(1, 2048, 1024, 64, 8, dtype=torch.bfloat16, device="cuda")
    tile = moe.tiles(8, 64)
    act = moe.moe_up(h, w13, 8, moe.align(idx, 64, tile[0]), tile)
    torch.testing.assert_close(ds.down_sum(act, w2, w, idx), ds.reference(act, w2, w, idx),
                               rtol=2e-2, atol=2e-2)


def test_the_model_decodes_the_same_through_either_down_path(monkeypatch):
    from tests.kernels.test_model_triton import MOE, _logits
    from zoo import ModelConfig
    from zoo import experts as X

    dtype = "bf16" if DEVICE == "cuda" else "fp32"
    cfg = ModelConfig.from_name("tiny", dtype=dtype, kv_dtype=dtype, kernels="triton", **MOE)
    prompt = torch.randint(0, cfg.vocab_size, (2, 7), device=DEVICE,
                           generator=torch.Generator(DEVICE).manual_seed(0))
    ref = _logits(cfg, prompt, 2)
    monkeypatch.setattr(X, "DOWN_SUM_TOKENS", 8)  # each decode step (2 tokens) through it
    calls = []
    monkeypatch.setattr(X, "down_sum", lambda *a: calls.append(1) or ds.down_sum(*a))
    got = _logits(cfg, prompt, 2)
    assert len(calls) == 2 * cfg.n_layers  # two decode steps, every layer (the tiny one: MoE)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)  # the prefill (14 tokens) as before
    tol = 3e-2 if dtype == "bf16" else 1e-5
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)
