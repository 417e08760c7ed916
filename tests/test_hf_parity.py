"""The zoo model matches Hugging Face transformers on the same weights (prefill + 8 decode steps)."""

import pytest
import torch

from tests.helpers import assert_decodes_like, hf_random_model
from zoo import Generator, ModelConfig, Transformer
from zoo.weights import load_hf_weights

transformers = pytest.importorskip("transformers")

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

CASES = {
    "llama_gqa_scaled_rope": dict(family="llama", rope_scaling=LLAMA3_ROPE),
    "llama_tied_mha": dict(family="llama", n_kv_heads=8, tie_embeddings=True),
    "mistral_mqa": dict(family="mistral", n_kv_heads=1, rope_theta=1e6),
    "qwen2_bias_headdim": dict(family="qwen2", qkv_bias=True, head_dim=24, n_kv_heads=4),
}


def _hf_model(cfg: ModelConfig, seed: int):
    # HF inits norms to 1 and biases to 0: randomized so they are tested
    return hf_random_model(transformers, cfg.to_hf(), seed)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case, tmp_path):
    cfg = ModelConfig.from_name("tiny", **CASES[case])
    hf = _hf_model(cfg, seed=hash(case) % 1000)
    # Round-trip through a safetensors file, as a real checkpoint would arrive.
    from safetensors.torch import save_file

    sd = {k: v.contiguous() for k, v in hf.state_dict().items()}
    if cfg.tie_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, tmp_path / "model.safetensors")
    zoo = load_hf_weights(Transformer.build(cfg, "cpu", init=False), tmp_path)

    B, T, steps = 2, 11, 8
    prompt = torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(1))
    gen = Generator(zoo, B, T + steps)
    with torch.no_grad():
        hf_logits = hf(prompt).logits
        zoo_all = zoo(prompt, zoo.positions[:T], kv_len=T)  # all positions, fills the cache
        torch.testing.assert_close(zoo_all, hf_logits, rtol=1e-4, atol=1e-4)
        gen = Generator(zoo, B, T + steps)
        last = gen.prefill(prompt)
        torch.testing.assert_close(last, hf_logits[:, -1], rtol=1e-4, atol=1e-4)
        seq = prompt
        tok = last.argmax(-1, keepdim=True)
        for _ in range(steps):
            seq = torch.cat([seq, tok], 1)
            ref = hf(seq).logits[:, -1]
            got = gen.decode(tok)
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
            tok = got.argmax(-1, keepdim=True)


def test_state_dict_source_and_errors():
    cfg = ModelConfig.from_name("tiny")
    hf = _hf_model(cfg, seed=3)
    sd = dict(hf.state_dict())
    zoo = load_hf_weights(Transformer.build(cfg, "cpu", init=False), sd)
    x = torch.randint(0, cfg.vocab_size, (1, 5))
    zoo.setup_cache(1, 5)
    torch.testing.assert_close(zoo(x, zoo.positions[:5], kv_len=5), hf(x).logits,
                               rtol=1e-4, atol=1e-4)
    missing = {k: v for k, v in sd.items() if "layers.1.mlp.up_proj" not in k}
    with pytest.raises(KeyError, match="up_proj"):
        load_hf_weights(Transformer.build(cfg, "cpu", init=False), missing)
    extra = dict(sd, **{"model.layers.0.self_attn.q_norm.weight": torch.ones(16)})
    with pytest.raises(KeyError, match="q_norm"):
        load_hf_weights(Transformer.build(cfg, "cpu", init=False), extra)
    wrong = ModelConfig.from_name("tiny", ffn_dim=320)
    with pytest.raises(ValueError, match="shape"):
        load_hf_weights(Transformer.build(wrong, "cpu", init=False), sd)


# ---- real checkpoints as `transformers` writes them today -----------------------------------

SAVED = {
    # Qwen2: q/k/v biases, RoPE base 1e6 (in `rope_parameters`, no top-level rope_theta)
    "qwen2_bias_theta_1e6": lambda: transformers.Qwen2Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=96, vocab_size=211, rope_theta=1e6, max_position_embeddings=64),
    # Llama-3.1: llama3 frequency rescaling (in `rope_parameters`)
    "llama31_rope_scaling": lambda: transformers.LlamaConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=96, vocab_size=211, rope_theta=5e5, max_position_embeddings=64,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
}


@pytest.mark.parametrize("case", sorted(SAVED))
def test_save_pretrained_round_trip(case, tmp_path):
    """HF model -> save_pretrained (config.json + safetensors) -> ModelConfig.from_hf ->
    load_hf_weights -> logits within fp32 tolerance of Hugging Face's, prefill and decode."""
    hf = hf_random_model(transformers, SAVED[case](), seed=7)
    hf.save_pretrained(tmp_path)
    saved = __import__("json").loads((tmp_path / "config.json").read_text())
    assert "rope_parameters" in saved  # the layout this test is about
    cfg = ModelConfig.from_hf(tmp_path, dtype="fp32", kv_dtype="fp32")
    if case.startswith("qwen2"):
        assert cfg.rope_theta == 1e6 and cfg.qkv_bias
    else:
        assert cfg.rope_scaling["rope_type"] == "llama3" and cfg.rope_scaling["factor"] == 8.0
    zoo = load_hf_weights(Transformer.build(cfg, "cpu", init=False), tmp_path)
    # 20 positions: past original_max_position_embeddings / 2, the scaled band matters
    assert_decodes_like(zoo, hf, cfg, B=2, T=20, steps=6, seed=2)


@pytest.mark.parametrize("extra,message", [
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e6, "factor": 4.0}},
     "rope_parameters type 'longrope' is not implemented"),
    ({"rope_scaling": {"type": "longrope", "factor": 2.0}}, "rope_scaling type 'longrope'"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling type 'dynamic'"),
    ({"mlp_bias": True}, "mlp_bias=true"),
    ({"attention_bias": True, "model_type": "olmoe", "num_experts": 4, "num_experts_per_tok": 2},
     "attention_bias=true"),
])
def test_unsupported_checkpoint_features_refused_at_config_time(extra, message):
    from zoo import DesignError

    hf = dict(ModelConfig.from_name("tiny").to_hf(), **extra)
    hf.pop("rope_theta") if "rope_parameters" in extra else None
    with pytest.raises(DesignError, match=message):
        ModelConfig.from_hf(hf)


def test_both_rope_layouts_read_alike():
    old = ModelConfig.from_name("tiny", rope_theta=1e6).to_hf()
    new = {k: v for k, v in old.items() if k != "rope_theta"}
    new["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6}
    assert ModelConfig.from_hf(old).rope_theta == ModelConfig.from_hf(new).rope_theta == 1e6


def test_generate_lengths_and_cache():
    from zoo import generate

    cfg = ModelConfig.from_name("tiny")
    model = Transformer.build(cfg, "cpu")
    prompt = torch.randint(0, cfg.vocab_size, (2, 5))
    assert generate(model, prompt, 0).shape == (2, 5)
    out = generate(model, prompt, 3)
    assert out.shape == (2, 8) and torch.equal(out[:, :5], prompt)
    assert model.cache.max_seq_len == 5 + 3 - 1  # the last token is never fed back


def test_prefill_embedding_bytes_capped_at_the_table():
    from zoo import counts

    cfg = ModelConfig.from_name("tiny")  # vocab 512, untied
    small = counts.prefill(cfg, 1, 64).bytes["weights"]
    big = counts.prefill(cfg, 64, 256).bytes["weights"]  # 16384 gathered rows > 512 in the table
    table = cfg.vocab_size * cfg.d_model * 4
    assert big - small <= table
    assert big == (counts.params(cfg).non_embedding + counts.params(cfg).lm_head) * 4 + table


# ---- config.json files as users edit them: read as transformers 5 reads them, or refused ------

def _tiny_hf(family: str, **edits) -> dict:
    """A tiny config.json of ``family`` as transformers writes it, then edited (a key set to
    ``None`` in ``edits`` is removed)."""
    cfg = ModelConfig.from_name("tiny", family=family, qkv_bias=family == "qwen2",
                                max_seq_len=64)
    hf = transformers.AutoConfig.for_model(**cfg.to_hf()).to_dict()
    for k, v in edits.items():
        if v is None:
            hf.pop(k, None)
        else:
            hf[k] = v
    return hf


def _matches_transformers(hf_dict: dict, tmp_path, seed: int = 0, **overrides):
    """The zoo's logits of every prompt position against transformers', same weights, fp32."""
    from safetensors.torch import save_file

    hf = hf_random_model(transformers, hf_dict, seed)
    cfg = ModelConfig.from_hf(hf_dict, dtype="fp32", kv_dtype="fp32", **overrides)
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, tmp_path / "m.safetensors")
    zoo = load_hf_weights(Transformer.build(cfg, "cpu", init=False), tmp_path / "m.safetensors")
    T = 24
    x = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(seed))
    zoo.setup_cache(2, T)
    with torch.no_grad():
        torch.testing.assert_close(zoo(x, zoo.positions[:T], kv_len=T), hf(x).logits,
                                   rtol=1e-4, atol=1e-4)
    return cfg


ROPE3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


@pytest.mark.parametrize("yarn", [
    {"factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 10000.0},
    # gpt-oss's: the correction range not truncated
    {"factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
     "original_max_position_embeddings": 8, "rope_theta": 150000.0},
    # DeepSeek-V2's: the attention factor from mscale / mscale_all_dim
    {"factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
     "original_max_position_embeddings": 8, "rope_theta": 10000.0},
], ids=["plain", "gpt_oss", "deepseek"])
def test_hf_yarn_rope_matches_transformers(yarn, tmp_path):
    """YaRN (arXiv:2309.00071): the ramp between interpolated and kept frequencies and the
    attention factor on cos / sin, read from rope_parameters, against transformers' Llama."""
    hf = _tiny_hf("llama", rope_parameters=dict(yarn, rope_type="yarn"))
    hf.pop("rope_theta", None)
    cfg = _matches_transformers(hf, tmp_path)
    assert cfg.rope_scaling["rope_type"] == "yarn"


def test_hf_rope_scaling_wins_over_rope_parameters(tmp_path):
    hf = _tiny_hf("llama", rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                  rope_scaling=dict(ROPE3, original_max_position_embeddings=16,
                                    rope_theta=50000.0))
    cfg = _matches_transformers(hf, tmp_path)
    assert cfg.rope_scaling["rope_type"] == "llama3" and cfg.rope_theta == 50000.0


def test_hf_top_level_original_max_position_embeddings_wins(tmp_path):
    hf = _tiny_hf("llama", rope_parameters=dict(ROPE3, original_max_position_embeddings=32,
                                                rope_theta=10000.0),
                  original_max_position_embeddings=8)
    cfg = _matches_transformers(hf, tmp_path)
    assert cfg.rope_scaling["original_max_position_embeddings"] == 8


def test_hf_llama3_rope_without_original_length_takes_max_position(tmp_path):
    hf = _tiny_hf("llama", rope_parameters=dict(ROPE3, rope_theta=10000.0))
    cfg = _matches_transformers(hf, tmp_path)
    assert cfg.rope_scaling["original_max_position_embeddings"] == hf["max_position_embeddings"]


def test_hf_qwen2_keeps_its_qkv_biases_whatever_attention_bias_says(tmp_path):
    cfg = _matches_transformers(_tiny_hf("qwen2", attention_bias=False), tmp_path)
    assert cfg.qkv_bias


def test_hf_qwen2_sliding_window_past_the_last_layer_is_full_attention(tmp_path):
    hf = _tiny_hf("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=2,
                  layer_types=None)
    cfg = _matches_transformers(hf, tmp_path)  # tiny has 2 layers: none slides
    assert cfg.sliding_window is None and not cfg.windowed
    cfg = _matches_transformers(dict(hf, max_window_layers=1), tmp_path)  # layer 1 slides over 8
    assert cfg.sliding_window == 8 and cfg.layer_types == "GL"


def _windowed_decodes_like(hf_dict, tmp_path, T, steps, **overrides):
    """A windowed design read from ``hf_dict`` against transformers' model of it: every prompt
    position (``_matches_transformers``), then a prefill and greedy decode steps past the
    window through the zoo's ring cache (``assert_decodes_like``)."""
    cfg = _matches_transformers(hf_dict, tmp_path, **overrides)
    hf = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**hf_dict)).float().eval()
    zoo = load_hf_weights(Transformer.build(cfg, "cpu", init=False),
                          {k: v.contiguous() for k, v in hf.state_dict().items()})
    assert_decodes_like(zoo, hf, cfg, B=2, T=T, steps=steps, seed=3)
    return cfg, zoo


@pytest.mark.parametrize("edits,window", [
    ({"sliding_window": 8}, 8),
    ({"sliding_window": None}, 4096),  # no key: transformers assumes 4096 (max_seq_len 64: full)
])
def test_hf_mistral_sliding_window_matches_transformers(edits, window, tmp_path):
    """Mistral-v0.1's window (every layer local): prompts longer than the window, then decode
    steps whose ring cache wraps, against transformers."""
    cfg, zoo = _windowed_decodes_like(_tiny_hf("mistral", **edits), tmp_path, T=20, steps=6)
    assert cfg.sliding_window == window and cfg.windowed == (window < cfg.max_seq_len)
    if cfg.windowed:  # the local layers' cache is the window
        assert zoo.cache.capacity == [window] * cfg.n_layers
        assert zoo.cache.nbytes() == 2 * cfg.n_layers * 2 * cfg.n_kv_heads * window * cfg.head_dim * 4


def test_hf_qwen3_local_and_global_layers_match_transformers(tmp_path):
    """A per-layer pattern (transformers' ``layer_types``) with QK-norm: one local, one global
    layer, the prompt past the window."""
    cfg = ModelConfig.from_name("tiny", qk_norm="head", max_seq_len=64, sliding_window=6,
                                layer_types="1:1")
    hf = transformers.AutoConfig.for_model(**cfg.to_hf()).to_dict()
    assert hf["layer_types"] == ["sliding_attention", "full_attention"]
    got, _ = _windowed_decodes_like(hf, tmp_path, T=17, steps=5)
    assert got.layer_types == "1:1" and got.sliding_window == 6


def test_hf_mistral_window_beyond_the_design_is_full_attention(tmp_path):
    hf = _tiny_hf("mistral", sliding_window=64)
    cfg = _matches_transformers(hf, tmp_path)  # max_seq_len 64: every position in the window
    assert cfg.max_seq_len == 64
    assert ModelConfig.from_hf(dict(hf, sliding_window=16), max_seq_len=16).max_seq_len == 16
