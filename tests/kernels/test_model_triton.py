"""End to end: the zoo model with kernels='triton' against kernels='torch' on the same weights."""

import pytest
import torch

from tests.kernels.conftest import DEVICE
from zoo import Generator, ModelConfig, Transformer

# decode steps compared: the interpreter runs every Triton program on the CPU, a step of the tiny
# model costing seconds there; a GPU runs them all
STEPS = 8 if DEVICE == "cuda" else 4


def _logits(cfg, prompt, steps, mode="eager"):
    m = Transformer.build(cfg, DEVICE, seed=0)
    gen = Generator(m, prompt.shape[0], prompt.shape[1] + steps, mode)
    out = [gen.prefill(prompt)]
    for i in range(steps):
        tok = torch.randint(0, cfg.vocab_size, (prompt.shape[0], 1), device=DEVICE,
                            generator=torch.Generator(DEVICE).manual_seed(i))
        out.append(gen.decode(tok))
    return torch.stack(out).float()


MOE = dict(n_experts=6, n_experts_active=2, expert_ffn_dim=40)
# latent attention (DeepSeek-V2's layout, shrunk): a latent of 48, RoPE part 8, no query LoRA
MLA = dict(n_kv_heads=8, head_dim=8, kv_lora_rank=48, qk_nope_head_dim=16, qk_rope_head_dim=8,
           v_head_dim=12)


@pytest.mark.parametrize("over", [dict(), dict(n_kv_heads=1, head_dim=24), dict(n_kv_heads=8),
                                  dict(qk_norm="head"), dict(qk_norm="full", **MOE),
                                  dict(MOE, first_k_dense=1, n_shared_experts=1),
                                  dict(sliding_window=8, layer_types="1:1"),
                                  dict(sliding_window=5, attn_sinks=True, out_bias=True,
                                       qkv_bias=True),
                                  dict(MLA, q_lora_rank=32, **MOE)],
                         ids=["gqa", "mqa_d24", "mha", "qk_norm_head", "moe_qk_norm_full",
                              "moe_dense_first_shared", "local_global", "window_sinks",
                              "mla_qlora_moe"])
def test_triton_path_matches_torch_path(over):
    dtype = "bf16" if DEVICE == "cuda" else "fp32"
    cfg = ModelConfig.from_name("tiny", dtype=dtype, kv_dtype=dtype, **over)
    prompt = torch.randint(0, cfg.vocab_size, (2, 13), device=DEVICE,
                           generator=torch.Generator(DEVICE).manual_seed(0))
    ref = _logits(cfg, prompt, STEPS)
    got = _logits(cfg.replace(kernels="triton"), prompt, STEPS)
    tol = 3e-2 if dtype == "bf16" else 1e-4
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_quantized_kv_cache_logits_stay_close(kv_dtype):
    if DEVICE == "cpu" and kv_dtype == "fp8_e4m3":
        pytest.skip("fp8 writes are checked on the GPU: the Triton interpreter's fp8 conversion "
                    "does not round like the hardware (see test_attention.py)")
    dtype = "bf16" if DEVICE == "cuda" else "fp32"
    cfg = ModelConfig.from_name("tiny", dtype=dtype, kv_dtype=dtype, kernels="triton")
    prompt = torch.randint(0, cfg.vocab_size, (2, 13), device=DEVICE,
                           generator=torch.Generator(DEVICE).manual_seed(0))
    ref = _logits(cfg, prompt, STEPS)
    got = _logits(cfg.replace(kv_dtype=kv_dtype), prompt, STEPS)
    # prefill attends to the fresh bf16 k/v: identical; decode reads the quantized cache
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    rel = ((got[1:] - ref[1:]).norm() / ref[1:].norm()).item()
    assert 0 < rel < (0.02 if kv_dtype == "int8" else 0.06), rel


@pytest.mark.parametrize("kv_dtype", [None, "int8"])
def test_rope_folded_into_attention_matches_the_two_launches(kv_dtype):
    """``switches.rope_in_attention``: the decode step's RoPE and cache write inside the
    attention launch give the logits of the separate RoPE + cache-write kernel (bit for bit in
    the interpreter, which runs both in the same order)."""
    dtype = "bf16" if DEVICE == "cuda" else "fp32"
    cfg = ModelConfig.from_name("tiny", dtype=dtype, kv_dtype=kv_dtype or dtype, kernels="triton",
                                n_kv_heads=2)
    prompt = torch.randint(0, cfg.vocab_size, (2, 13), device=DEVICE,
                           generator=torch.Generator(DEVICE).manual_seed(0))
    from kernels import switches

    with switches.use(rope_in_attention=False):
        two = _logits(cfg, prompt, 3)
    with switches.use(rope_in_attention=True):
        one = _logits(cfg, prompt, 3)
    if DEVICE == "cpu":
        torch.testing.assert_close(one, two, rtol=0, atol=0)
    else:
        torch.testing.assert_close(one, two, rtol=3e-2, atol=3e-2)


@pytest.mark.gpu
def test_triton_cudagraph_single_graph_matches_eager():
    cfg = ModelConfig.from_name("tiny", dtype="bf16", kv_dtype="bf16", kernels="triton",
                                max_seq_len=512)
    prompt = torch.randint(0, cfg.vocab_size, (3, 70), device="cuda")
    eager = _logits(cfg, prompt, 70)
    graph = _logits(cfg, prompt, 70, mode="cudagraph")
    torch.testing.assert_close(graph, eager, rtol=3e-2, atol=3e-2)


def test_triton_kernels_refused_on_cpu_without_interpreter(monkeypatch):
    from zoo import DesignError

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(DesignError, match="kernels=triton needs a CUDA GPU"):
        ModelConfig.from_name("tiny", kernels="triton").validate({"type": "cpu"})


@pytest.mark.parametrize("over", [dict(), dict(kv_dtype="int8"),
                                  dict(n_kv_heads=1, batch=20), MLA, dict(MLA, batch=18),
                                  dict(qk_norm="full"), dict(qk_norm="head", batch=1)])
def test_compiled_triton_decode_step_matches_eager(over):
    """``torch.compile(fullgraph=True)`` traces the Triton decode step (its kernels are custom ops,
    ``kernels.ops``; Dynamo failed on their Python dispatch before) and gives the eager step's
    logits and KV cache: the GEMV path (batch 2), quantized KV, and the batched path (batch 20:
    RMSNorm, SwiGLU, RoPE + cache write and attention as ops); latent attention on both; QK-norm
    in one launch (``kernels.qk_norm``: v copied for two rows, a slice for one)."""
    over = dict(over)
    B = over.pop("batch", 2)
    dtype = "bf16" if DEVICE == "cuda" else "fp32"
    cfg = ModelConfig.from_name("tiny", dtype=dtype, kv_dtype=over.pop("kv_dtype", dtype),
                                kernels="triton", **over)
    prompt = torch.randint(0, cfg.vocab_size, (B, 9), device=DEVICE,
                           generator=torch.Generator(DEVICE).manual_seed(0))
    models = [Transformer.build(cfg, DEVICE, seed=0) for _ in range(2)]
    for m in models:
        Generator(m, B, 16).prefill(prompt)
    eager, compiled = models
    backend = "inductor" if DEVICE == "cuda" else "aot_eager"  # no C++ build on the CPU lane
    step = torch.compile(lambda tok, pos: compiled(tok, pos, kv_len=16, masked=True),
                         backend=backend, fullgraph=True)
    torch._dynamo.reset()
    for p in range(9, 9 + STEPS // 2):
        tok = torch.randint(0, cfg.vocab_size, (B, 1), device=DEVICE,
                            generator=torch.Generator(DEVICE).manual_seed(p))
        pos = torch.tensor([p], device=DEVICE)
        with torch.no_grad():
            want = eager(tok, pos, kv_len=16, masked=True)
            got = step(tok, pos)
        tol = 3e-2 if dtype == "bf16" else 1e-5
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    torch.testing.assert_close(compiled.cache.k, eager.cache.k, rtol=tol, atol=tol)
    torch.testing.assert_close(compiled.cache.v, eager.cache.v, rtol=tol, atol=tol)


@pytest.mark.gpu
def test_windowed_design_in_a_cuda_graph():
    """A local layer's ring and the sinks under CUDA graphs (decode and the graphed prefill's
    FlexAttention) give the eager step's logits."""
    if DEVICE != "cuda":
        pytest.skip("needs a CUDA GPU")
    cfg = ModelConfig.from_name("tiny", dtype="bf16", kv_dtype="bf16", kernels="triton",
                                sliding_window=8, layer_types="1:1", attn_sinks=True)
    prompt = torch.randint(0, cfg.vocab_size, (2, 13), device=DEVICE,
                           generator=torch.Generator(DEVICE).manual_seed(0))
    torch.testing.assert_close(_logits(cfg, prompt, STEPS, "cudagraph"),
                               _logits(cfg, prompt, STEPS), rtol=3e-2, atol=3e-2)
