"""The performance model's launch count per stage, against what the eager model launches.

``sweep.analysis.predict.kernel_list`` lists the kernels of a stage with how many launches each
takes (``zoo.launches.TORCH_KERNELS``, counted by hand from the model's code). Here the torch
path of each shipped preset (its norm, FFN kind, biases, tying, QK-norm and experts: every
expert active, so each is touched as the count's expectation has it; widths shrunk and depth capped
at 4 layers: the count does not depend on the widths and is linear in the depth, which the
64-layer odd shape keeps) and the held-out table's odd shapes run on the CPU in bf16 under
``torch.profiler``, a prefill as ``zoo.generate`` runs it and a decode step as its CUDA graph
captures it (``masked``), and the ATen ops that launch a kernel on a GPU are counted: every
top-level ATen op but views and no-op casts (a composite op, SDPA or ``linear``, is one kernel on
the GPU; the CPU's decomposition below it is not counted).
"""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import tests.relu2_ffn  # noqa: F401  a registered kind of the tests' own (ReLU^2)
from sweep.analysis.predict import kernel_list
from zoo import ModelConfig, Transformer, presets

VIEWS = {"aten::unsqueeze", "aten::slice", "aten::select", "aten::transpose", "aten::view",
         "aten::split_with_sizes", "aten::split", "aten::chunk", "aten::t", "aten::permute",
         "aten::expand", "aten::squeeze", "aten::detach", "aten::alias", "aten::as_strided",
         "aten::_unsafe_view", "aten::unflatten", "aten::narrow", "aten::empty", "aten::lift_fresh",
         "aten::resolve_conj", "aten::resolve_neg", "aten::empty_strided"}
MAYBE_COPY = {"aten::to", "aten::reshape", "aten::contiguous", "aten::flatten"}
COPIES = {"aten::_to_copy", "aten::clone", "aten::copy_"}
SMALL = dict(d_model=64, n_heads=4, head_dim=16, ffn_dim=96, vocab_size=256, max_seq_len=64,
             dtype="bf16", kv_dtype="bf16", kernels="torch", weight_dtype="auto")
ODD = {"d64_w768": dict(n_layers=64), "gelu_layernorm": dict(ffn_type="gelu", norm="layernorm",
                                                             n_layers=3),
       "relu2": dict(ffn_type="relu2"),
       "mqa": dict(n_kv_heads=1), "mha": dict(n_kv_heads=4), "bias_tied": dict(
           qkv_bias=True, tie_embeddings=True),
       "moe_shared_dense_first": dict(n_experts=3, n_experts_active=3, expert_ffn_dim=24,
                                      n_shared_experts=2, first_k_dense=1, n_layers=3,
                                      router_renorm=False, qk_norm="full"),
       # latent attention (DeepSeek-V2's), with and without the query's bottleneck
       "mla": dict(n_kv_heads=4, head_dim=8, kv_lora_rank=32, qk_nope_head_dim=16,
                   qk_rope_head_dim=8, v_head_dim=12),
       "mla_q_lora": dict(n_kv_heads=4, head_dim=8, kv_lora_rank=32, qk_nope_head_dim=16,
                          qk_rope_head_dim=8, v_head_dim=12, q_lora_rank=24)}


def _copies(e) -> bool:
    return any(c.name in COPIES or _copies(c) for c in e.cpu_children)


def launches(events) -> int:
    """Kernels a GPU would launch for the profiled ATen ``events`` (module doc)."""
    n = 0
    for e in events:
        if not e.name.startswith("aten::") or e.name in VIEWS:
            continue
        par = e.cpu_parent
        while par is not None and not par.name.startswith("aten::"):
            par = par.cpu_parent
        if par is not None:  # inside another ATen op: its kernel, or the CPU's decomposition
            continue
        if e.name in MAYBE_COPY and not _copies(e):
            continue
        n += 1
    return n


def _designs():
    out = []
    for name in presets():
        p = ModelConfig.from_name(name)
        kv = 2 if p.n_kv_heads < p.n_heads else 4
        # a mixture of experts with every expert active: each is touched, as the count assumes
        moe = dict(n_experts=4, n_experts_active=4, expert_ffn_dim=32,
                   router_renorm=p.router_renorm) if p.moe else {}
        out.append((name, dict(n_layers=min(p.n_layers, 4), n_kv_heads=kv, norm=p.norm,
                               ffn_type=p.ffn_type, qkv_bias=p.qkv_bias, qk_norm=p.qk_norm,
                               tie_embeddings=p.tie_embeddings, **moe)))
    return out + [(k, dict(n_kv_heads=2, n_layers=2) | v) for k, v in ODD.items()]


@pytest.mark.parametrize("name,over", _designs(), ids=[d[0] for d in _designs()])
def test_the_predicted_launch_count_is_what_the_eager_model_launches(name, over):
    cfg = ModelConfig.from_name("tiny", **(SMALL | over)).validate()
    model = Transformer.build(cfg, "cpu", seed=0)
    B, T, S = 2, 8, 32
    model.setup_cache(B, S)
    prompt = torch.randint(0, cfg.vocab_size, (B, T))
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as pre:
        model(prompt, model.positions[:T], kv_len=T, last_only=True)
    tok, pos = torch.randint(0, cfg.vocab_size, (B, 1)), torch.tensor([T])
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as dec:
        model(tok, pos, kv_len=S, masked=True)

    def want(new, ctx):  # the model's forward: the greedy sample ("sample", "argmax") is not
        return sum(k.launches * k.repeat for k in kernel_list(cfg, B, new, ctx, "torch")
                   if k.op not in ("sample", "argmax"))

    assert (launches(pre.events()), launches(dec.events())) == (want(T, T), want(1, S))
