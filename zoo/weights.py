"""Load Hugging Face Llama / Mistral / Qwen2 / Qwen3 (and their MoE: Mixtral, Qwen3-MoE, OLMoE)
weights into a zoo ``Transformer`` (no pickle).

The name mapping lives in one function (nanoGPT ``from_pretrained``): HF keeps q, k, v and gate, up as
separate matrices; the zoo stacks them into ``wqkv`` and ``w13``. The three families share HF's Llama
naming (Qwen2 adds q/k/v biases). Checkpoints are read with ``safetensors`` (a single
``model.safetensors``, or shards listed in ``model.safetensors.index.json``), or from an in-memory
state dict.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from .config import ModelConfig
from .model import Transformer


def hf_to_zoo(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Map an HF state dict (``model.layers.0.self_attn.q_proj.weight`` ...) to zoo names.

    Raises:
        KeyError: naming the HF tensors that are missing, or those left unused.
    """
    hf = {k.removeprefix("model."): v for k, v in hf.items()}
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in hf:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        used.add(name)
        return hf[name]

    take.hf = hf

    out = {"tok_embeddings.weight": take("embed_tokens.weight"), "norm.weight": take("norm.weight")}
    if not cfg.tie_embeddings:
        out["output.weight"] = take("lm_head.weight")
    elif "lm_head.weight" in hf:
        used.add("lm_head.weight")
    for i in range(cfg.n_layers):
        a, z = f"layers.{i}.", f"layers.{i}."
        if cfg.kv_lora_rank:  # multi-head latent attention (DeepSeek-V2's names)
            out.update(_mla(take, cfg, a + "self_attn.", z + "attention."))
            out.update(_mlp(take, cfg, i, a, z))
            continue
        out[z + "attention.wqkv.weight"] = torch.cat(
            [take(a + f"self_attn.{p}_proj.weight") for p in "qkv"])
        if cfg.qkv_bias:
            out[z + "attention.wqkv.bias"] = torch.cat(
                [take(a + f"self_attn.{p}_proj.bias") for p in "qkv"])
        out[z + "attention.wo.weight"] = take(a + "self_attn.o_proj.weight")
        if cfg.out_bias:
            out[z + "attention.wo.bias"] = take(a + "self_attn.o_proj.bias")
        if cfg.attn_sinks:  # gpt-oss's per-head sink logits
            out[z + "attention.sinks"] = take(a + "self_attn.sinks")
        if cfg.qk_norm != "none":
            for p in "qk":
                out[z + f"attention.{p}_norm.weight"] = take(a + f"self_attn.{p}_norm.weight")
        out.update(_mlp(take, cfg, i, a, z))
    unused = sorted(k for k in hf if k not in used and not re.search(r"rotary_emb\.inv_freq$", k))
    if unused:
        raise KeyError(f"checkpoint tensors not used by the zoo model: {unused[:8]}"
                       + (" ..." if len(unused) > 8 else ""))
    return out


def _mlp(take, cfg: ModelConfig, i: int, a: str, z: str) -> dict[str, torch.Tensor]:
    """Block ``i``'s FFN (dense or experts) and its norms, in zoo names."""
    out = {}
    if cfg.layer_is_moe(i):
        out.update(_experts(take.hf, take, cfg, a, z + "feed_forward."))
    else:
        out[z + "feed_forward.w13.weight"] = torch.cat(
            [take(a + "mlp.gate_proj.weight"), take(a + "mlp.up_proj.weight")])
        out[z + "feed_forward.w2.weight"] = take(a + "mlp.down_proj.weight")
    out[z + "attention_norm.weight"] = take(a + "input_layernorm.weight")
    if cfg.sandwich_norm:  # Gemma 2 / 3: a norm after each of attention and MLP as well
        out[z + "post_attention_norm.weight"] = take(a + "post_attention_layernorm.weight")
        out[z + "ffn_norm.weight"] = take(a + "pre_feedforward_layernorm.weight")
        out[z + "post_ffn_norm.weight"] = take(a + "post_feedforward_layernorm.weight")
    else:
        out[z + "ffn_norm.weight"] = take(a + "post_attention_layernorm.weight")
    return out


def _mla(take, cfg: ModelConfig, a: str, z: str) -> dict[str, torch.Tensor]:
    """One MLA layer's projections and norms (``zoo.mla_attention``) from DeepSeek-V2's names."""
    out = {}
    if cfg.q_lora_rank:
        out.update({z + "q_norm.weight": take(a + "q_a_layernorm.weight"),
                    z + "wq_b.weight": take(a + "q_b_proj.weight")})
    q = take(a + ("q_a_proj.weight" if cfg.q_lora_rank else "q_proj.weight"))
    # the query projection (or its bottleneck) stacked over the latent projection: ``wqkv_a``
    out.update({z + "wqkv_a.weight": torch.cat([q, take(a + "kv_a_proj_with_mqa.weight")]),
                z + "kv_norm.weight": take(a + "kv_a_layernorm.weight"),
                z + "wkv_b.weight": take(a + "kv_b_proj.weight"),
                z + "wo.weight": take(a + "o_proj.weight")})
    return out


def _experts(hf: dict, take, cfg: ModelConfig, a: str, z: str) -> dict[str, torch.Tensor]:
    """One MoE layer's router and experts in zoo names (``zoo.experts``: ``router.weight``,
    ``w13 [E, 2 Fe, d]`` gate then up, ``w2 [E, d, Fe]``), from any of the layouts a checkpoint
    holds them in: transformers 5's stacked ``mlp.experts.gate_up_proj`` / ``down_proj``, the
    published per-expert ``mlp.experts.{e}.gate_proj`` / ``up_proj`` / ``down_proj`` (Qwen3-MoE,
    OLMoE), or Mixtral's ``block_sparse_moe.gate`` and ``experts.{e}.w1`` / ``w3`` / ``w2``."""
    E = cfg.n_experts
    if a + "block_sparse_moe.gate.weight" in hf:  # Mixtral's published layout
        m = a + "block_sparse_moe."
        names = ("w1", "w3", "w2")
    else:
        m = a + "mlp."
        names = ("gate_proj", "up_proj", "down_proj")
    out = {z + "router.weight": take(m + "gate.weight")}
    if cfg.n_shared_experts:  # DeepSeek's ungated shared experts, one FFN
        out[z + "shared.w13.weight"] = torch.cat([take(m + "shared_experts.gate_proj.weight"),
                                                  take(m + "shared_experts.up_proj.weight")])
        out[z + "shared.w2.weight"] = take(m + "shared_experts.down_proj.weight")
    if m + "experts.gate_up_proj" in hf:
        out[z + "w13"] = take(m + "experts.gate_up_proj")
        out[z + "w2"] = take(m + "experts.down_proj")
        return out
    g, u, d = ([take(f"{m}experts.{e}.{n}.weight") for e in range(E)] for n in names)
    out[z + "w13"] = torch.stack([torch.cat([g[e], u[e]]) for e in range(E)])
    out[z + "w2"] = torch.stack(d)
    return out


def read_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """Read all tensors of an HF checkpoint folder or file with safetensors (CPU tensors).

    Accepts a ``.safetensors`` file, a folder with ``model.safetensors`` or with
    ``model.safetensors.index.json`` and its shards, or a ``.bin``/``.pt`` file read with
    ``torch.load(weights_only=True)``.

    Raises:
        FileNotFoundError: if no checkpoint is found at ``path``.
        ValueError: a shard index that is not one (``zoo.checkpoint.checkpoint_files``).
    """
    from safetensors.torch import load_file

    from .checkpoint import checkpoint_files

    files = checkpoint_files(path)
    if files[0].suffix != ".safetensors":
        return torch.load(files[0], map_location="cpu", weights_only=True)
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(f))
    return out


def load_hf_weights(model: Transformer, source: str | Path | dict[str, torch.Tensor]) -> Transformer:
    """Copy HF weights (a checkpoint path or a state dict) into ``model`` in place.

    Tensors are cast to the model's dtype and device. Shapes must match the model's config.

    Raises:
        KeyError: missing or unused checkpoint tensors.
        ValueError: a tensor whose shape differs from the model's.
    """
    hf = read_checkpoint(source) if isinstance(source, (str, Path)) else source
    zoo = hf_to_zoo(hf, model.cfg)
    own = model.state_dict()
    with torch.no_grad():
        for name, t in zoo.items():
            if own[name].shape != t.shape:
                raise ValueError(f"{name}: checkpoint shape {tuple(t.shape)} != model shape "
                                 f"{tuple(own[name].shape)}")
            own[name].copy_(t)
    return model
