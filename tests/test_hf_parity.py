"""The zoo model matches Hugging Face transformers on the same weights (prefill + 8 decode steps)."""

import pytest
import torch

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
    torch.manual_seed(seed)
    hf_cfg = transformers.AutoConfig.for_model(**cfg.to_hf())
    m = transformers.AutoModelForCausalLM.from_config(hf_cfg).float().eval()
    with torch.no_grad():  # HF inits norms to 1 and biases to 0: randomize them so they are tested
        for p in m.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    return m


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
