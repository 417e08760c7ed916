"""GPU checks of the zoo's decode paths and the timers (skipped without a GPU)."""

import pytest
import torch

from zoo import Generator, ModelConfig, Transformer
from zoo.generate import GRAPH_BUCKET

pytestmark = pytest.mark.gpu


def _pair(mode, cfg, B, T, steps):
    torch.manual_seed(0)
    m = Transformer.build(cfg, "cuda", seed=0)
    gen = Generator(m, B, T + steps + 1, mode)
    prompt = torch.randint(0, cfg.vocab_size, (B, T), device="cuda",
                           generator=torch.Generator("cuda").manual_seed(1))
    out = [gen.prefill(prompt)]
    tok = out[0].argmax(-1, keepdim=True)
    for _ in range(steps):
        out.append(gen.decode(tok))
        tok = torch.randint(0, cfg.vocab_size, (B, 1), device="cuda",
                            generator=torch.Generator("cuda").manual_seed(len(out)))
    return torch.stack(out)


@pytest.mark.parametrize("n_kv_heads", [1, 2, 8])
def test_cudagraph_decode_matches_eager(n_kv_heads):
    cfg = ModelConfig.from_name("tiny", dtype="bf16", kv_dtype="bf16", n_kv_heads=n_kv_heads,
                                d_model=256, n_heads=8, head_dim=32, n_layers=3, max_seq_len=512)
    T, steps = GRAPH_BUCKET - 5, 12  # crosses a bucket boundary
    eager = _pair("eager", cfg, 3, T, steps)
    graph = _pair("cudagraph", cfg, 3, T, steps)
    torch.testing.assert_close(graph.float(), eager.float(), atol=3e-2, rtol=3e-2)


def test_ceilings_are_plausible():
    from sweep.hardware import _copy_rate, _gemm_rate
    from sweep.measure.timing import Timer

    t = Timer("cuda")
    assert _copy_rate(t, 1 << 28, "cuda")["copy_bytes_s"] > 2e11
    assert _gemm_rate(t, 4096, "bf16", "cuda")["gemm_flops_bf16"] > 5e13
