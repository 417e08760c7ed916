"""Design validation refuses impossible designs with a message naming the field; HF import."""

import json

import pytest

from zoo import DesignError, ModelConfig, Transformer, presets
from zoo.config import CONFIG_DIR

INVALID = [
    (dict(n_kv_heads=3), "n_heads .*multiple of n_kv_heads"),
    (dict(n_kv_heads=16), "n_kv_heads .*must not exceed n_heads"),
    (dict(head_dim=15), "head_dim .*even"),
    (dict(d_model=0), "d_model must be a positive integer"),
    (dict(ffn_dim=-4), "ffn_dim must be a positive integer"),
    (dict(n_layers=2.5), "n_layers must be a positive integer"),
    (dict(dtype="bf17"), "dtype='bf17' is not one of"),
    (dict(kv_dtype="int4"), "kv_dtype='int4' is not one of"),
    (dict(ffn_type="relu"), "ffn_type='relu'"),
    (dict(norm="batchnorm"), "norm='batchnorm'"),
    (dict(kernels="cuda"), "kernels='cuda'"),
    (dict(norm_eps=0.0), "norm_eps"),
    (dict(kv_dtype="int8", kernels="torch"), "kv_dtype=int8 needs kernels=.triton."),
    (dict(kv_dtype="fp16"), r"kv_dtype \(fp16\) must equal dtype \(fp32\)"),
]


@pytest.mark.parametrize("override,message", INVALID, ids=[str(o) for o, _ in INVALID])
def test_invalid_design_is_refused_before_allocation(override, message, monkeypatch):
    cfg = ModelConfig.from_name("tiny").replace(**override)
    with pytest.raises(DesignError, match=message):
        cfg.validate()
    # build() validates first: nothing may be allocated for a refused design.
    import torch

    def no_alloc(*a, **k):
        raise AssertionError("allocated a tensor for an invalid design")

    monkeypatch.setattr(torch.nn.Module, "to_empty", no_alloc)
    with pytest.raises(DesignError, match=message):
        Transformer.build(cfg, "cpu")


def test_device_dependent_checks():
    cfg = ModelConfig.from_name("tiny", dtype="bf16", kv_dtype="bf16")
    volta = {"type": "cuda", "compute_capability": (7, 0), "name": "Tesla V100"}
    with pytest.raises(DesignError, match="dtype=bf16 needs compute capability >= 8.0; Tesla V100"):
        cfg.validate(volta)
    cfg.validate({"type": "cuda", "compute_capability": (9, 0)})
    cfg.validate({"type": "cpu"})
    fp8 = cfg.replace(kv_dtype="fp8_e4m3", kernels="triton")
    with pytest.raises(DesignError, match="fp8_e4m3 needs compute capability >= 8.9"):
        fp8.validate({"type": "cuda", "compute_capability": (8, 0), "name": "A100"})


def test_unknown_field_and_preset():
    with pytest.raises(DesignError, match="unknown ModelConfig field.*n_head\\b"):
        ModelConfig.from_name("tiny").replace(n_head=4)
    with pytest.raises(DesignError, match=r"n_kv_head \(did you mean n_kv_heads\?\)"):
        ModelConfig.from_name("tiny").replace(n_kv_head=4)
    with pytest.raises(DesignError, match="unknown model preset 'llama9'.*llama3_1_8b"):
        ModelConfig.from_name("llama9")


EXPECTED = {  # published sizes
    "llama3_2_1b": dict(d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8, head_dim=64,
                        ffn_dim=8192, vocab_size=128256, tie_embeddings=True, qkv_bias=False),
    "llama3_1_8b": dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128,
                        ffn_dim=14336, vocab_size=128256, tie_embeddings=False),
    "mistral_7b_v0_3": dict(d_model=4096, n_layers=32, n_kv_heads=8, vocab_size=32768,
                            rope_theta=1e6, rope_scaling=None),
    "qwen2_5_7b": dict(d_model=3584, n_layers=28, n_heads=28, n_kv_heads=4, head_dim=128,
                       ffn_dim=18944, vocab_size=152064, qkv_bias=True, norm_eps=1e-6),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_presets(name):
    cfg = ModelConfig.from_name(name).validate()
    for k, v in EXPECTED[name].items():
        assert getattr(cfg, k) == v, k
    assert cfg.dtype == "bf16" and cfg.kv_dtype == "bf16"
    assert name in presets()


def test_llama3_params_match_published():
    from zoo import counts

    assert counts.params(ModelConfig.from_name("llama3_1_8b")).total == 8_030_261_248
    assert counts.params(ModelConfig.from_name("llama3_2_1b")).total == 1_235_814_400


def test_from_hf_rejects_other_families(tmp_path):
    hf = json.loads((CONFIG_DIR / "llama3_1_8b.json").read_text())
    with pytest.raises(DesignError, match="model_type='gemma2' is not supported"):
        ModelConfig.from_hf(dict(hf, model_type="gemma2"))
    with pytest.raises(DesignError, match="rope_scaling type 'longrope'"):
        ModelConfig.from_hf(dict(hf, rope_scaling={"rope_type": "longrope", "factor": 4.0}))
    # Qwen2's window on the layers from max_window_layers (28 by default) on: read, not refused
    q = ModelConfig.from_hf(dict(hf, model_type="qwen2", use_sliding_window=True))
    assert q.sliding_window == 4096 and q.layer_types == "G" * 28 + "L" * 4
    (tmp_path / "config.json").write_text(json.dumps(hf))
    assert ModelConfig.from_hf(tmp_path).d_model == 4096


def test_a_malformed_config_json_is_refused_naming_the_file_and_key(tmp_path):
    """A config.json that is not JSON, not one object, or holds a key of the wrong type is
    refused by name (a newcomer met a traceback for ``[1, 2, 3]``, "could not convert string
    to float" for ``rope_theta``, ``d_model`` for ``hidden_size``, and a ``rope_scaling`` list
    read silently as no scaling)."""
    hf = json.loads((CONFIG_DIR / "llama3_1_8b.json").read_text())
    f = tmp_path / "config.json"
    cases = [("[1, 2, 3]", f"{f}: a config.json holds one JSON object of keys, not a list"),
             (json.dumps(hf)[:44], f"{f}: not a JSON file"),
             (json.dumps(dict(hf, rope_theta="abc")), "rope_theta='abc' must be a number"),
             (json.dumps(dict(hf, hidden_size="big")), "hidden_size='big' must be an integer"),
             (json.dumps(dict(hf, num_hidden_layers=True)), "num_hidden_layers=True must be an "
                                                            "integer"),
             (json.dumps(dict(hf, rope_scaling=[1, 2])), "rope_scaling=[1, 2] must be an object"),
             # read by bool() or an `or` default, these built another model (an audit's files):
             # tied embeddings, biases, multi-head attention, a window of none, bf16
             (json.dumps(dict(hf, tie_word_embeddings="false")),
              "tie_word_embeddings='false' must be true or false"),
             (json.dumps(dict(hf, attention_bias="false")), "attention_bias='false' must be true"),
             (json.dumps(dict(hf, num_key_value_heads=0)), "num_key_value_heads=0 must be at "
                                                           "least 1"),
             (json.dumps(dict(hf, head_dim=0)), "head_dim=0 must be at least 1"),
             (json.dumps(dict(hf, max_position_embeddings=0)), "max_position_embeddings=0 must"),
             (json.dumps(dict(hf, model_type="mistral", sliding_window=0)),
              "sliding_window=0 is not a window"),
             (json.dumps(dict(hf, torch_dtype="float8_e4m3fn")),
              "torch_dtype='float8_e4m3fn' is not one of bfloat16, float16, float32"),
             (json.dumps(dict(hf, partial_rotary_factor=0.5)),
              "partial_rotary_factor=0.5: RoPE over part of each head is not modelled")]
    for text, message in cases:
        f.write_text(text)
        with pytest.raises(DesignError) as e:
            ModelConfig.from_hf(f)
        assert message in str(e.value), (text[:60], str(e.value))
    with pytest.raises(DesignError, match="config.json: hidden_size='big'"):
        ModelConfig.from_hf(dict(hf, hidden_size="big"))


@pytest.mark.parametrize("rs,message", [
    ({"rope_type": "dynamic", "factor": 2.0}, "rope_scaling.rope_type='dynamic' is not one of"),
    ({"factor": 2.0}, "rope_scaling.rope_type=None is not one of"),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
     "has no low_freq_factor, high_freq_factor: llama3 needs"),
    ({"rope_type": "yarn", "factor": 4.0}, "has no original_max_position_embeddings"),
    ({"rope_type": "linear", "factor": -1.0}, "rope_scaling.factor must be a positive number"),
])
def test_a_rope_scaling_the_tables_cannot_build_is_refused_by_key(rs, message):
    # it was taken, and the trial failed with KeyError: 'low_freq_factor' (a predicted study
    # priced it silently); from a config.json transformers refuses the same
    with pytest.raises(DesignError, match=message):
        ModelConfig.from_name("tiny").replace(rope_scaling=rs).validate()
    hf = json.loads((CONFIG_DIR / "llama3_1_8b.json").read_text())
    with pytest.raises(DesignError, match="has no low_freq_factor"):
        ModelConfig.from_hf(dict(hf, rope_scaling={"rope_type": "llama3", "factor": 8.0}))


def test_kernels_auto_is_the_devices_fastest_path():
    cfg = ModelConfig.from_name("tiny")
    assert cfg.kernels == "auto"
    assert cfg.resolved("cuda").kernels == "triton" and cfg.resolved("cpu").kernels == "torch"
    assert cfg.replace(kv_dtype="int8").resolved("cpu").kernels == "triton"  # only Triton has it
    assert cfg.replace(kernels="torch").resolved("cuda").kernels == "torch"  # asked for: kept
    assert Transformer.build(cfg, "cpu").cfg.kernels == "torch"


def test_a_quantized_config_json_reads_its_weight_format():
    """``quantization_config`` was ignored: Qwen3-30B-A3B-FP8's config read as bf16 weights (a
    peak memory twice the FP8 model's). fp8 and AWQ / GPTQ int4 g128 read as their formats;
    another method refused by the key."""
    hf = ModelConfig.from_name("qwen3_30b_a3b").to_hf()
    assert ModelConfig.from_hf(hf).weight_dtype == "auto"
    fp8 = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    assert ModelConfig.from_hf({**hf, "quantization_config": fp8}).weight_dtype == "fp8"
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128}
    assert ModelConfig.from_hf({**hf, "quantization_config": awq}).weight_dtype == "int4_g128"
    other = {**hf, "quantization_config": {"quant_method": "mxfp4"}}
    with pytest.raises(DesignError, match="quantization_config .*mxfp4"):
        ModelConfig.from_hf(other)
    assert ModelConfig.from_hf(other, weight_dtype="q4_0").weight_dtype == "q4_0"  # as it says


def test_a_multimodal_wrapper_points_at_its_text_config():
    # Gemma 3 4B-27B ship model_type gemma3 with the language model in text_config
    text = ModelConfig.from_name("gemma3_1b").to_hf()
    with pytest.raises(DesignError, match="its text_config .*gemma3_text.* of its own"):
        ModelConfig.from_hf({"model_type": "gemma3", "text_config": text})
    assert ModelConfig.from_hf(text).n_layers == ModelConfig.from_name("gemma3_1b").n_layers


def test_a_gemma3_text_config_that_leaves_out_its_defaults_reads_as_transformers_does(tmp_path):
    # gemma-3-4b-it's text_config (the keys at Gemma3TextConfig's defaults left out) had been
    # refused: "has no 'num_attention_heads', which its family always writes"
    text = {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
            "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024}
    (tmp_path / "config.json").write_text(json.dumps(text))
    c = ModelConfig.from_hf(tmp_path)
    assert (c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size) == (
        2560, 34, 8, 4, 256, 262_208)
    assert c.max_seq_len == 131_072 and c.rope_scaling["factor"] == 8.0
