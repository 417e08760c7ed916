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


@pytest.mark.parametrize("kernels", ["torch", "triton"])
def test_greedy_step_in_the_graph_matches_the_eager_step(kernels):
    # decode_greedy's graph holds the argmax and advances the position itself: its tokens are
    # the argmax of its logits, and the logits are the eager step's fed the same tokens, across
    # a bucket boundary (the torch path's second graph, captured with the buffer passed back),
    # with a caller's own token tensor once, and after the position is reset (a trial's repeat)
    cfg = ModelConfig.from_name("tiny", dtype="bf16", kv_dtype="bf16", n_kv_heads=2, d_model=256,
                                n_heads=8, head_dim=32, n_layers=3, max_seq_len=512,
                                kernels=kernels)
    B, T, steps = 3, GRAPH_BUCKET - 5, 12
    prompt = torch.randint(0, cfg.vocab_size, (B, T), device="cuda",
                           generator=torch.Generator("cuda").manual_seed(1))
    g = Generator(Transformer.build(cfg, "cuda", seed=0), B, T + steps + 1, "cudagraph")
    e = Generator(Transformer.build(cfg, "cuda", seed=0), B, T + steps + 1, "eager")
    first = g.prefill(prompt).argmax(-1, keepdim=True)
    e.prefill(prompt)
    for repeat in range(2):
        g.pos = e.pos = T
        tok = first
        for i in range(steps if repeat == 0 else 3):
            fed = tok.clone()
            nxt = g.decode_greedy(tok)
            want = e.decode(fed)
            assert torch.equal(nxt, g.last_logits.argmax(-1, keepdim=True))
            torch.testing.assert_close(g.last_logits.float(), want.float(), atol=3e-2, rtol=3e-2)
            tok = nxt.clone() if i == 5 else nxt
    assert len(g._greedy_graphs) == (2 if kernels == "torch" else 1)


@pytest.mark.parametrize("kernels", ["torch", "triton"])
def test_cudagraph_prefill_replays_each_prompt(kernels):
    cfg = ModelConfig.from_name("tiny", dtype="bf16", kv_dtype="bf16", n_kv_heads=2, d_model=256,
                                n_heads=8, head_dim=32, n_layers=3, max_seq_len=512,
                                kernels=kernels)
    m = Transformer.build(cfg, "cuda", seed=0)
    g = torch.Generator("cuda").manual_seed(3)
    prompts = [torch.randint(0, cfg.vocab_size, (2, 100), device="cuda", generator=g)
               for _ in range(2)]
    graph = Generator(m, 2, 128, "cudagraph")
    got = [graph.prefill(p) for p in prompts]  # captured on the first, replayed on the second
    assert graph.prefill_mode == "cudagraph" and len(graph._prefill_graphs) == 1
    eager = Generator(m, 2, 128, "eager")
    want = [eager.prefill(p) for p in prompts]
    assert eager.prefill_mode == "eager"
    assert not torch.equal(want[0], want[1])
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b.float(), atol=3e-2, rtol=3e-2)


def test_ceilings_are_plausible():
    from sweep.measure.ceilings import _copy_rate, _gemm_rate
    from sweep.measure.timing import Timer

    t = Timer("cuda")
    assert _copy_rate(t, 1 << 28, "cuda")["copy_bytes_s"] > 2e11
    assert _gemm_rate(t, 4096, "bf16", "cuda")["gemm_flops_bf16"] > 5e13


def test_the_gemm_between_copies_reports_its_duty_and_slow_down():
    """``ceilings._mixed`` against the GEMM's burst time measured here: alternating with copies
    for about half the busy time, it reports the duty its copies gave (near 0.5) and a slow-down
    near 1 (H100: 1.01 at duty 0.49; a broken timing of the GEMM calls reads far from it)."""
    from sweep.measure.ceilings import _gemm_rate, _mixed
    from sweep.measure.timing import Timer

    gemm_s = 2 * 8192**3 / _gemm_rate(Timer("cuda"), 8192, "bf16", "cuda")["gemm_flops_bf16"]
    duty, slow = _mixed(8192, gemm_s, 0.5)
    assert 0.35 < duty < 0.65 and 1.0 <= slow < 1.15


def _gpu_study(tmp_path, *extra):
    from sweep.plan import plan_from_config
    from sweep.study import run
    from tests.helpers import compose_cfg

    over = [f"results_dir={tmp_path}", f"study.storage=sqlite:///{tmp_path}/optuna.db",
            "quiet=true", "device=cuda", "model=tiny", "workload.prompt_len=64",
            "workload.new_tokens=8", "workload.repeats=2", "workload.warmup=1",
            "study.n_trials=1", *extra]
    _, df = run(plan_from_config(compose_cfg(over)))
    return df.iloc[0]


def test_profile_torch_on_gpu(tmp_path):
    r = _gpu_study(tmp_path, "profile=torch")
    assert r["state"] == "COMPLETE", r.get("fail_reason")
    assert 0 < r["decode_gpu_active_pct"] <= 100 and r["decode_cpu_gpu_ratio"] > 0
    shares = [r[c] for c in r.index if str(c).startswith("decode_kernel_share_")]
    assert sum(shares) == pytest.approx(1.0)
    assert r["gemm_calls_logged"] > 0  # cuBLASLt logged the model's matmuls


def test_profile_ncu_on_gpu(tmp_path):
    import shutil

    if not shutil.which("ncu"):
        pytest.skip("ncu (Nsight Compute) not installed")
    r = _gpu_study(tmp_path, "profile=ncu")
    assert r["state"] == "COMPLETE", r.get("fail_reason")
    for st in ("prefill", "decode"):
        assert pd_notna(r.get(f"{st}_dram_bytes")), r.get(f"{st}_ncu_reason")
        assert r[f"{st}_dram_bytes_over_min"] > 0.5
        assert 0 < r[f"{st}_l2_hit_pct"] <= 100 and r[f"{st}_top_stall"]


def pd_notna(v):
    import math

    return v is not None and not (isinstance(v, float) and math.isnan(v))
