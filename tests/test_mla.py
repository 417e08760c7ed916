"""Multi-head latent attention (issue 39): DeepSeek-V2's MLA and DeepSeekMoE against
transformers, the latent cache, the shipped DeepSeek-V2-Lite and MLA ranks refused by name."""

import pytest

from zoo import DesignError, ModelConfig, Transformer, counts

transformers = pytest.importorskip("transformers")


def _deepseek(q_lora_rank=None, rope=None):
    """A tiny DeepSeek-V2 config as transformers writes it: 3 layers (the first dense), 6 routed
    experts of which 2 per token and one shared, MLA with a 16-channel latent."""
    kw = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=4, vocab_size=300,
              max_position_embeddings=64, q_lora_rank=q_lora_rank, kv_lora_rank=16,
              qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10, head_dim=8,
              n_routed_experts=6, num_experts_per_tok=2, n_shared_experts=1,
              first_k_dense_replace=1)
    if rope:
        kw["rope_parameters"] = rope
    return transformers.DeepseekV2Config(**kw).to_dict()


YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 0.707,
        "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1,
        "original_max_position_embeddings": 8}


@pytest.mark.parametrize("q_lora_rank,rope", [(None, None), (24, None), (None, YARN)],
                         ids=["q_full", "q_lora", "yarn_mscale"])
def test_deepseek_v2_matches_transformers(q_lora_rank, rope):
    """Every prompt position, then greedy decode steps over the latent cache (fp32, 1e-4; the
    zoo decodes in the absorbed form, transformers expands every position's keys: the two forms
    agree): MLA with or without the query bottleneck and with YaRN's softmax scale, DeepSeekMoE
    with a dense first layer and a shared expert."""
    from tests.helpers import assert_decodes_like, assert_prompt_logits_like, hf_random_model
    from zoo.weights import load_hf_weights

    hf_dict = _deepseek(q_lora_rank, rope)
    cfg = ModelConfig.from_hf(hf_dict, dtype="fp32", kv_dtype="fp32")
    assert (cfg.kv_lora_rank, cfg.q_lora_rank, cfg.n_shared_experts) == (16, q_lora_rank or 0, 1)
    hf = hf_random_model(transformers, hf_dict, router_std=0.5)
    zoo = load_hf_weights(Transformer.build(cfg, "cpu", init=False), dict(hf.state_dict()))
    assert_prompt_logits_like(zoo, hf, cfg, T=12)
    assert_decodes_like(zoo, hf, cfg, B=2, T=9, steps=5, seed=2)
    assert counts.params(cfg).total == sum(p.numel() for p in zoo.parameters())
    # the cache holds the latent and the rotated key per token and layer, nothing per head
    assert zoo.cache.k[0].shape[1:] == (1, 14, 16) and zoo.cache.v[0].shape[1:] == (1, 14, 8)


def test_deepseek_v2_lite_preset():
    """The shipped DeepSeek-V2-Lite: 15.7 B parameters, 2.4 B activated (DeepSeek's count, the
    embedding table left out), 31 KB of cache per token against Llama-3.1-8B's 128 KB; a GPU
    runs it on the Triton path."""
    cfg = ModelConfig.from_name("deepseek_v2_lite")
    p = counts.params(cfg)
    assert p.total == pytest.approx(15.7e9, rel=0.01)
    assert p.active - p.embedding == pytest.approx(2.4e9, rel=0.03)
    assert counts.kv_bytes_per_token(cfg) == 27 * (512 + 64) * 2
    # on a GPU the Triton path: kernels.mla_rope, kernels.mla_decode (a quantized latent cache
    # stays on the torch path: tests/test_attention_kinds.py)
    assert cfg.resolved("cuda").kernels == "triton"
    cfg.replace(kernels="triton").validate()


@pytest.mark.parametrize("over,field", [
    (dict(kv_lora_rank=4096), "kv_lora_rank"),  # not below d_model
    (dict(q_lora_rank=2048), "q_lora_rank"),
    (dict(qk_rope_head_dim=63), "qk_rope_head_dim"),
    (dict(head_dim=128), "head_dim"),
    (dict(v_head_dim=0), "v_head_dim"),
    (dict(n_kv_heads=4), "n_kv_heads"),
    (dict(kv_lora_rank=0), "needs kv_lora_rank"),
    (dict(sliding_window=1024), "not modelled for MLA"),
])
def test_mla_ranks_that_do_not_fit_are_refused_by_name(over, field):
    base = ModelConfig.from_name("deepseek_v2_lite")
    with pytest.raises(DesignError, match=field):
        base.replace(**over).validate()


def test_mla_counts():
    """A decode step reads the latents (not per-head keys and values) and counts the absorbed
    form's FLOPs, which grow with the context at 2 H (2 r + rope) per position."""
    cfg = ModelConfig.from_name("deepseek_v2_lite")
    a, b = counts.decode_step(cfg, 1, 1000), counts.decode_step(cfg, 1, 2000)
    assert b.bytes["kv_read"] - a.bytes["kv_read"] == 1000 * 27 * (512 + 64) * 2
    per_pos = 2 * 16 * (2 * 512 + 64)
    assert b.flops["attention"] - a.flops["attention"] == 1000 * 27 * per_pos
