"""Greedy sampling's argmax kernel against torch.argmax (ties, chunks, counters, a CUDA graph)."""

import pytest
import torch

from kernels import argmax

SHAPES = [(1, 128256), (3, 5000), (8, 4096), (2, 4097), (5, 1), (64, 1000)]


@pytest.mark.parametrize("M,V", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_argmax_matches_torch(M, V, dtype, device):
    x = torch.randn(M, V, generator=torch.Generator().manual_seed(M * V)).to(device, dtype)
    for _ in range(2):  # the second call finds the counters the first one left zeroed
        got = argmax.argmax(x)
        assert got.shape == (M, 1) and got.dtype == torch.int64
        torch.testing.assert_close(got, argmax.reference(x), rtol=0, atol=0)


def test_ties_go_to_the_first_index_across_chunks(device):
    V = 3 * argmax.BLOCK + 5
    x = torch.zeros(4, V, device=device)
    x[0, [V - 1, argmax.BLOCK + 7, 2 * argmax.BLOCK]] = 3.0  # equal maxima in three chunks
    x[1, [5, 6]] = 1.0  # within one chunk
    x[2] = float("-inf")  # every logit -inf: index 0, as torch
    x[3, V - 1] = 2.0  # the last, in the partial chunk
    got = argmax.argmax(x)
    assert got[:, 0].tolist() == [argmax.BLOCK + 7, 5, 0, V - 1]
    torch.testing.assert_close(got, argmax.reference(x), rtol=0, atol=0)


def test_nan_is_the_largest_and_every_answer_a_column(device):
    V = 2 * argmax.BLOCK + 100
    x = torch.randn(4, V, generator=torch.Generator().manual_seed(5)).to(device)
    x[0] = float("nan")  # all NaN: index 0, as torch
    x[1, [argmax.BLOCK + 3, V - 2]] = float("nan")  # the first NaN, past a larger finite value
    x[1, 7] = 1e30
    x[2, V - 1] = float("nan")  # in the partial last chunk
    x[3, 11] = float("inf")  # +inf, no NaN
    got = argmax.argmax(x)
    assert got[:, 0].tolist() == [0, argmax.BLOCK + 3, V - 1, 11]
    torch.testing.assert_close(got, argmax.reference(x), rtol=0, atol=0)


def test_strided_rows_and_out(device):
    base = torch.randn(6, 9000, device=device)
    x = base[::2, 100:8100]  # rows of stride 18000, unit stride along V
    out = torch.full((3, 1), -1, dtype=torch.int64, device=device)
    assert argmax.argmax(x, out=out) is out
    torch.testing.assert_close(out, argmax.reference(x), rtol=0, atol=0)


def test_bad_input_is_refused(device):
    with pytest.raises(ValueError, match="unit stride"):
        argmax.argmax(torch.randn(8, 4, device=device).t())
    with pytest.raises(ValueError, match=r"\[M, V\]"):
        argmax.argmax(torch.randn(8, device=device))
    with pytest.raises(ValueError, match="floating-point"):
        argmax.argmax(torch.ones(2, 8, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match=r"M, V > 0"):
        argmax.argmax(torch.randn(0, 8, device=device))
    with pytest.raises(ValueError, match="out must be"):
        argmax.argmax(torch.randn(2, 8, device=device),
                      out=torch.empty(2, dtype=torch.int64, device=device))


@pytest.mark.gpu
def test_argmax_in_a_cuda_graph_replayed(device):
    x = torch.randn(8, 128256, device=device, dtype=torch.bfloat16)
    argmax.argmax(x)  # counters allocated before the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = argmax.argmax(x)
    for seed in range(3):  # new logits each replay: the counters reset inside the graph
        x.copy_(torch.randn(8, 128256, generator=torch.Generator().manual_seed(seed)))
        g.replay()
        torch.testing.assert_close(out, argmax.reference(x), rtol=0, atol=0)
