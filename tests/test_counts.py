"""Analytic FLOPs and parameters against the real model (FlopCounterMode, numel)."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from zoo import Generator, ModelConfig, Transformer, counts

CONFIGS = {
    "gqa": dict(),
    "mha": dict(n_kv_heads=8),
    "mqa_headdim_ne": dict(n_kv_heads=1, head_dim=24),
    "odd_ffn_bias_tied": dict(ffn_dim=333, qkv_bias=True, tie_embeddings=True),
    "gelu_layernorm": dict(ffn_type="gelu", norm="layernorm", n_layers=3),
    # a window past the prompt (the band convention of zoo.attn.attended is tested in
    # test_attention_kinds.py), sinks and the output bias
    "sinks_bias_window": dict(sliding_window=64, layer_types="1:1", attn_sinks=True,
                              out_bias=True, qkv_bias=True),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_param_count_matches_module(name):
    cfg = ModelConfig.from_name("tiny", **CONFIGS[name])
    m = Transformer.build(cfg, "cpu")
    p = counts.params(cfg)
    assert p.total == sum(t.numel() for t in m.parameters())
    emb = m.tok_embeddings.weight.numel() + (0 if cfg.tie_embeddings else m.output.weight.numel())
    assert p.non_embedding == p.total - emb


def _counted(fn):
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH):
        fn()
    return fc.get_total_flops()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_flops_match_flop_counter(name):
    cfg = ModelConfig.from_name("tiny", **CONFIGS[name])
    m = Transformer.build(cfg, "cpu")
    B, T = 3, 37
    gen = Generator(m, B, T + 4)
    prompt = torch.randint(0, cfg.vocab_size, (B, T))
    got = _counted(lambda: gen.prefill(prompt))
    want = counts.prefill(cfg, B, T)
    assert got == pytest.approx(want.matmul_flops, rel=0.01)
    # one decode step at cache length T
    tok = torch.randint(0, cfg.vocab_size, (B, 1))
    got = _counted(lambda: gen.decode(tok))
    want = counts.decode_step(cfg, B, T)
    assert got == pytest.approx(want.matmul_flops, rel=0.01)
    # what FlopCounterMode leaves out is small and accounted for separately
    assert want.elementwise_flops < 0.1 * want.matmul_flops


def test_flops_on_real_shapes_per_token():
    # 2 * params per token (Kaplan) dominates decode at short context on Llama-3.1-8B.
    cfg = ModelConfig.from_name("llama3_1_8b")
    st = counts.decode_step(cfg, 1, 0)
    p = counts.params(cfg)
    assert st.matmul_flops == pytest.approx(2 * (p.non_embedding + p.lm_head), rel=0.01)
    # decode bytes: the weights (minus the embedding table) dominate at batch 1
    assert st.bytes["weights"] == pytest.approx(2 * (p.total - p.embedding), rel=0.001)


def test_kv_bytes_per_token_and_decode_mean():
    cfg = ModelConfig.from_name("llama3_2_1b")
    assert counts.kv_bytes_per_token(cfg) == 2 * 16 * 8 * 64 * 2
    mha = cfg.replace(n_kv_heads=32)
    assert counts.kv_bytes_per_token(mha) == 4 * counts.kv_bytes_per_token(cfg)
    # the mean over steps equals the mean of per-step counts
    steps = [counts.decode_step(cfg, 4, 100 + i).min_bytes for i in range(9)]
    assert counts.decode_mean(cfg, 4, 100, 10).min_bytes == sum(steps) / len(steps)


def test_weight_formats_count_their_bits_and_are_predicted_only():
    import pytest

    from zoo import DesignError, ModelConfig, counts
    from zoo.formats import WEIGHT_FORMATS

    bf = ModelConfig.from_name("llama3_1_8b")
    for fmt, bits in WEIGHT_FORMATS.items():
        if bits is None:
            continue
        q = bf.replace(weight_dtype=fmt).validate()
        ratio = counts.summary(q, 1, 512, 128)["weight_bytes"] / counts.summary(
            bf, 1, 512, 128)["weight_bytes"]
        assert ratio == pytest.approx(bits / 16), fmt
    assert bf.weight_bits == 16 and ModelConfig.from_name("tiny").weight_bits == 32
    with pytest.raises(DesignError, match="weight_dtype=q4_0 is predicted only"):
        bf.replace(weight_dtype="q4_0").validate({"type": "cuda"})
    with pytest.raises(DesignError, match="weight_dtype"):
        bf.replace(weight_dtype="q3").validate()


def test_a_quantized_design_is_priced_on_its_bytes():
    from sweep.analysis import calibration_store as store
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.predict import predict
    from sweep.analysis.pricing import Calibrated
    from zoo import ModelConfig

    have = store.shipped("NVIDIA H100 80GB HBM3")
    c = Calibrated(have)
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 128}
    bf = ModelConfig.from_name("llama3_1_8b", kernels="triton")
    a = predict(bf, wl, load_spec("h100_sxm"), c)
    b = predict(bf.replace(weight_dtype="q4_0"), wl, load_spec("h100_sxm"), c)
    assert b["decode_pred_ms_calibrated"] < 0.45 * a["decode_pred_ms_calibrated"]  # 4.5 / 16 bits
    assert b["decode_pred_ms_roofline"] < 0.35 * a["decode_pred_ms_roofline"]
    assert "4.5-bit weights priced" in b["prediction_notes"]


def test_memory_need_holds_the_weights_at_their_format():
    # a q4_0 Llama-3.1-8B needs its weights at 4.5 bits a weight (4.5 GB), not at the model dtype's
    # 16 (16 GB): it had been pruned from a 16 GB phone as "needs 16.2 GB" while the same row's
    # weight_bytes said 4.5 GB
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.targets import predict_on

    cfg = ModelConfig.from_name("llama3_1_8b").resolved("cuda")
    q4 = cfg.replace(weight_dtype="q4_0")
    full, quant = counts.memory_need(cfg, 1, 512, 64), counts.memory_need(q4, 1, 512, 64)
    assert quant["weights"] == pytest.approx(full["weights"] * 4.5 / 16)
    assert quant["kv_cache"] == full["kv_cache"]
    row = predict_on(q4, {"batch": 1, "prompt_len": 512, "new_tokens": 64},
                     load_spec("snapdragon_8_gen3"))
    assert row["fits_memory"] is True
