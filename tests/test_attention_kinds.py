"""Sliding windows, local/global patterns and attention sinks (issue 39): gpt-oss's attention
against transformers', the rules of the fields, and what the counts make of a window."""

import pytest
import torch

from zoo import DesignError, ModelConfig, Transformer, counts

transformers = pytest.importorskip("transformers")


def _gpt_oss_attention(cfg: ModelConfig, layer: int):
    """transformers' ``GptOssAttention`` of ``cfg``'s shape at ``layer`` (eager, fp32), its
    biases and sinks random."""
    hf_cfg = transformers.GptOssConfig(
        hidden_size=cfg.d_model, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim, num_hidden_layers=cfg.n_layers, sliding_window=cfg.sliding_window,
        layer_types=["sliding_attention" if cfg.layer_window(i) else "full_attention"
                     for i in range(cfg.n_layers)], attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        attn_implementation="eager")
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    torch.manual_seed(layer)
    m = GptOssAttention(hf_cfg, layer).float().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    return m


@pytest.mark.parametrize("layer", [0, 1])
def test_gpt_oss_attention_layers_match_transformers(layer):
    """gpt-oss's attention (q/k/v/o biases, a sink logit per head, a 6-token window on layer 0
    and full attention on layer 1) on a 17-token prompt, then one decode step over the ring,
    against transformers' eager ``GptOssAttention`` with the same weights, fp32 within 1e-4."""
    cfg = ModelConfig.from_name("tiny", dtype="fp32", kv_dtype="fp32", qkv_bias=True,
                                out_bias=True, attn_sinks=True, sliding_window=6,
                                layer_types="1:1")
    hf = _gpt_oss_attention(cfg, layer)
    zoo = Transformer.build(cfg, "cpu", init=False)
    att = zoo.layers[layer].attention
    with torch.no_grad():
        att.wqkv.weight.copy_(torch.cat([hf.q_proj.weight, hf.k_proj.weight, hf.v_proj.weight]))
        att.wqkv.bias.copy_(torch.cat([hf.q_proj.bias, hf.k_proj.bias, hf.v_proj.bias]))
        att.wo.weight.copy_(hf.o_proj.weight)
        att.wo.bias.copy_(hf.o_proj.bias)
        att.sinks.copy_(hf.sinks)
    T, D = 18, cfg.head_dim
    zoo.setup_cache(2, T)
    x = torch.randn(2, T, cfg.d_model, generator=torch.Generator().manual_seed(5))
    pos = torch.arange(T)
    win = cfg.layer_window(layer)
    keep = (pos[None, :] <= pos[:, None]) & (
        (pos[None, :] > pos[:, None] - win) if win else True)
    additive = torch.zeros(T, T).masked_fill(~keep, float("-inf"))[None, None]
    cos, sin = zoo.rope_cos[:, : D // 2], zoo.rope_sin[:, : D // 2]
    with torch.no_grad():
        want = hf(x, (cos[None, :T], sin[None, :T]), additive.expand(2, 1, T, T))[0]
        rope = (zoo.rope_cos, zoo.rope_sin)
        prompt = att(x[:, :-1], (rope[0][: T - 1], rope[1][: T - 1]), pos[: T - 1], T - 1, None)
        step = att(x[:, -1:], (rope[0][T - 1:T], rope[1][T - 1:T]), pos[T - 1:], T, None)
    torch.testing.assert_close(prompt, want[:, :-1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(step, want[:, -1:], rtol=1e-4, atol=1e-4)
    if win:
        assert att.cache.capacity[layer] == win


@pytest.mark.parametrize("over,field", [
    (dict(sliding_window=0), "sliding_window"),
    (dict(sliding_window=-4), "sliding_window"),
    (dict(sliding_window=8, layer_types="LGL"), "layer_types"),  # tiny has 2 layers
    (dict(sliding_window=8, layer_types=["sliding_attention"]), "layer_types"),
    (dict(sliding_window=8, layer_types="LX"), "layer_types"),
    (dict(layer_types="1:1"), "sliding_window"),  # local layers need a window
    (dict(sliding_window=8, layer_types="a:b"), "layer_types"),
    (dict(attn_sinks="yes"), "attn_sinks"),
])
def test_bad_windows_and_patterns_refused_by_name(over, field):
    with pytest.raises(DesignError, match=field):
        ModelConfig.from_name("tiny", **over).validate()


def test_a_window_past_max_seq_len_is_full_attention():
    """Accepted, and stated: no position is ever outside it, so the layers attend fully and
    keep a full cache."""
    cfg = ModelConfig.from_name("tiny", sliding_window=10_000).validate()
    assert not cfg.windowed and cfg.layer_window(0) is None
    m = Transformer.build(cfg, "cpu")
    assert m.setup_cache(1, 64).capacity == [64, 64]
    assert counts.decode_step(cfg, 1, 200) == counts.decode_step(cfg.replace(sliding_window=None),
                                                                 1, 200)


def test_ratio_and_hf_list_spell_one_pattern():
    a = ModelConfig.from_name("tiny", n_layers=12, sliding_window=64, layer_types="5:1")
    b = ModelConfig.from_name("tiny", n_layers=12, sliding_window=64,
                              layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 2)
    assert a == b and a.layer_types == "5:1"  # the ratio's spelling: it holds at any depth
    assert a.identity_dict() == b.identity_dict()
    deeper = a.replace(n_layers=18)
    assert [deeper.layer_window(i) for i in range(18)] == ([64] * 5 + [None]) * 3
    c = ModelConfig.from_name("tiny", n_layers=4, sliding_window=64, layer_types="GGLL")
    assert c.layer_types == "GGLL"  # no ratio spells it: its letters, one per layer
    with pytest.raises(DesignError, match="layer_types"):
        c.replace(n_layers=6)


def test_local_layers_read_only_their_window():
    """Decode bytes and FLOPs: a local layer reads ``min(context, window)`` positions, so past
    the window a 5:1 design's step grows with the global layers only."""
    base = ModelConfig.from_name("llama3_2_1b")
    mix = base.replace(sliding_window=1024, layer_types="3:1")  # 12 local, 4 global of 16
    per_pos = counts.kv_bytes_per_token(base) // base.n_layers  # one layer, one position
    for ctx in (512, 8192, 32768):
        full, local = counts.decode_step(base, 1, ctx), counts.decode_step(mix, 1, ctx)
        attended = 4 * (ctx + 1) + 12 * min(ctx + 1, 1024)
        assert local.bytes["kv_read"] == attended * per_pos
        assert full.bytes["kv_read"] == 16 * (ctx + 1) * per_pos
    grow = (counts.decode_step(mix, 1, 32768).bytes["kv_read"]
            - counts.decode_step(mix, 1, 8192).bytes["kv_read"])
    assert grow == 4 * (32768 - 8192) * per_pos


@pytest.mark.parametrize("window", [None, 7, 64])
@pytest.mark.parametrize("sinks", [False, True])
def test_blocked_prefill_equals_one_block(window, sinks, monkeypatch):
    """The prefill in blocks of query rows (a 32k prompt's way) gives the one-block result: each
    block sees exactly the keys of its rows' windows."""
    from zoo import gqa

    g = torch.Generator().manual_seed(0)
    B, H, Hkv, T, D = 2, 8, 2, 300, 16
    q, k, v = (torch.randn(B, h, T, D, generator=g) for h in (H, Hkv, Hkv))
    s = torch.randn(H, generator=g) if sinks else None
    pos = torch.arange(T)
    want = gqa._math(q, k, v, gqa.window_mask(pos, pos, window), s)
    monkeypatch.setattr(gqa, "SCORE_BUDGET", B * H * ((window or T) + 64) * 20)  # 15 blocks
    torch.testing.assert_close(gqa.blocked(q, k, v, window, s), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,kind", [
    ("heldout_attention", lambda c: c.windowed or c.attn_sinks), ("heldout_moe", lambda c: c.moe),
    ("heldout_moe_routing", lambda c: c.moe)])
def test_frozen_sets_of_the_new_kinds_load(name, kind):
    """Issues 38 / 39, item 4: the frozen held-out sets hold >= 10 designs of the new kinds, each
    a valid design whose workload fits its max_seq_len (``python -m sweep.cli.validate --set``)."""
    from sweep.cli import validate as V

    s = V.load_set(name)
    chosen = V.items(s, "cuda")
    assert len(chosen) >= 10 and "for checking only" in (
        V.CONF / f"validation/{name}.yaml").read_text().lower()
    assert all(kind(c) for _, c, _, _ in chosen)
    for _, c, w, _ in chosen:
        assert w["prompt_len"] + w["new_tokens"] <= c.validate().max_seq_len


def _gemma3_hf(**edits):
    """A tiny Gemma 3 text config as transformers writes it (6 layers, 5:1 over a 6-token window,
    the global layers' RoPE linearly scaled by 8), then edited."""
    hf = transformers.Gemma3TextConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=300, max_position_embeddings=64,
        sliding_window=6, query_pre_attn_scalar=24,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
        ).to_dict()
    hf.update(edits)
    return hf


def test_gemma3_matches_transformers(tmp_path):
    """Gemma 3 (text): the (1 + w) RMSNorm, sandwich norms, the embedding scale, the
    query_pre_attn_scalar softmax scale, GeGLU, per-head QK-norm, tied embeddings, 5:1 local /
    global layers with their own RoPE bases (the global ones linearly scaled): every position
    of a prompt past the window, then decode steps over the ring, fp32 within 1e-4."""
    from tests.helpers import assert_decodes_like, assert_prompt_logits_like, hf_random_model
    from zoo.weights import load_hf_weights

    hf_dict = _gemma3_hf()
    cfg = ModelConfig.from_hf(hf_dict, dtype="fp32", kv_dtype="fp32")
    assert (cfg.layer_types, cfg.sliding_window, cfg.rope_local_theta) == ("5:1", 6, 1e4)
    assert cfg.rope_scaling["rope_type"] == "linear" and cfg.attn_scale == 24 ** -0.5
    assert cfg.resolved("cuda").kernels == "torch"  # Gemma's features: zoo.torch_only
    hf = hf_random_model(transformers, hf_dict)  # the norms (weight 1 + w) made to matter
    zoo = load_hf_weights(Transformer.build(cfg, "cpu", init=False), dict(hf.state_dict()))
    assert_prompt_logits_like(zoo, hf, cfg, T=20)
    assert_decodes_like(zoo, hf, cfg, B=2, T=17, steps=5, seed=2)
    assert counts.params(cfg).total == sum(p.numel() for p in zoo.parameters())
    back = ModelConfig.from_hf(cfg.to_hf(), dtype="fp32", kv_dtype="fp32")  # written and read
    assert back.replace(name=cfg.name, family=cfg.family) == cfg


def test_gemma3_1b_preset_and_refusals():
    """The shipped Gemma-3-1B: its published parameter count; kernels=triton and the keys the
    zoo does not model refused by name."""
    cfg = ModelConfig.from_name("gemma3_1b")
    assert counts.params(cfg).total == 999_885_952  # google/gemma-3-1b-pt
    assert cfg.layer_types == "5:1" and cfg.sliding_window == 512  # its 26 layers, 5 local: 1
    with pytest.raises(DesignError, match="kernels=torch only"):
        cfg.replace(kernels="triton").validate()
    for key, value in (("final_logit_softcapping", 30.0), ("attn_logit_softcapping", 50.0),
                       ("use_bidirectional_attention", True), ("hidden_activation", "gelu")):
        with pytest.raises(DesignError, match=key):
            ModelConfig.from_hf(_gemma3_hf(**{key: value}))


def test_review_cases_windows_to_hf_rows_and_budget():
    """A biased design with a window is not written as Mistral (which has no biases); Qwen3's
    window defaults to transformers' 4096; a row's float window reads back as an integer; the
    blocked prefill's score blocks stay within their budget."""
    from sweep.analysis.targets import config_of
    from zoo import gqa

    biased = ModelConfig.from_name("tiny", sliding_window=8, qkv_bias=True, out_bias=True)
    with pytest.raises(DesignError, match="sliding_window=8"):
        biased.to_hf()
    qwen = ModelConfig.from_name("tiny", qk_norm="head").to_hf()
    qwen.update(use_sliding_window=True, max_window_layers=1, layer_types=None)
    qwen.pop("sliding_window", None)
    got = ModelConfig.from_hf(qwen)
    assert (got.sliding_window, got.layer_types) == (4096, "GL")
    row = dict(ModelConfig.from_name("tiny", sliding_window=16).to_dict(), sliding_window=16.0,
               model="tiny", rope_scaling="")
    assert config_of(row).validate().sliding_window == 16
    sizes = []
    real = gqa._math
    try:
        gqa._math = lambda q, k, *a: sizes.append(q.shape[2] * k.shape[2]) or real(q, k, *a)
        B, H, T, W = 1, 4, 4096, 128
        q = torch.randn(B, H, T, 8)
        k = torch.randn(B, 2, T, 8)
        budget = gqa.SCORE_BUDGET
        gqa.SCORE_BUDGET = 1 << 20
        gqa.blocked(q, k, k, W, torch.zeros(H))
    finally:
        gqa._math, gqa.SCORE_BUDGET = real, budget
    assert max(sizes) * B * H <= 1 << 20 and len(sizes) > 1


def test_a_rings_decode_entry_is_measured_and_priced_as_a_ring():
    """A local layer's decode-attention entry is a ring's (``ring`` 1, the cache's capacity its
    window: the kernel plans its splits by the capacity; timed with the workload's length as
    capacity, a 4096-slot window read 52 us against 29 us in the model, H100,
    ``results/reference/ring_moe_probe_h100``); a window longer than the context is an unwrapped
    cache of the window's slots, a global layer's the workload's length. Priced, a ring entry
    corrects rings only."""
    import pandas as pd

    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from sweep.analysis.needs import KEYS, missing, needs

    base = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    wl = {"batch": 8, "prompt_len": 32768, "new_tokens": 64}
    mix = base.replace(sliding_window=4096, layer_types="5:1")
    want = needs([(mix, wl, "cudagraph")], "cuda")["decode_attn"]
    ctx = 32768 + 32
    assert set(want) == {("triton", "bf16", 8, 8, 4, 4096, 64, 1, 0, 4096),
                         ("triton", "bf16", 8, 8, 4, ctx, 64, 0, 0, 32768 + 64)}
    wide = base.replace(sliding_window=65536, max_seq_len=131072, layer_types="1:1")
    assert ("triton", "bf16", 8, 8, 4, ctx, 64, 0, 0, 32768 + 64) in \
        needs([(wide, wl, "cudagraph")], "cuda")["decode_attn"]
    # a table from before the column: its rows are no ring's, so the ring entry is missing
    old = pd.DataFrame([dict(kind="decode_attn", impl="triton", kv_dtype="bf16", B=8, Hkv=8,
                             G=4, S=4096, D=64, time_s=52e-6)])
    assert len(missing(old, {"decode_attn": want})["decode_attn"]) == 2
    assert KEYS["decode_attn"][-2:] == ("ring", "R")  # R: latent attention's RoPE key

    shipped = store.shipped("NVIDIA H100 80GB HBM3")
    t = shipped.table  # without any ring entry (the reship of 2026-11-27g measured this one)
    shipped = shipped.with_(table=t[~((t.kind == "decode_attn") & (t.ring.fillna(0) == 1))])
    att = [x for x in perf.kernel_list(mix, 8, 1, ctx, "triton") if x.kind == "decode_attn"]
    ring = next(x for x in att if x.shape["ring"])
    assert ring.shape["S"] == 4096 and ring.shape["window"] == 4096
    t0 = pricing.Calibrated(shipped).price(ring)[0]
    rows = pd.DataFrame([dict(kind="decode_attn", impl="triton", kv_dtype="bf16", B=8, Hkv=8,
                              G=4, S=4096, D=64, ring=1, bytes=ring.bytes,
                              scores=8 * 32 * 4096.0, time_s=3 * t0, time_s_min=3 * t0,
                              time_s_p90=3 * t0)])
    with_ring = pricing.Calibrated(shipped.with_(table=pd.concat([shipped.table, rows],
                                                             ignore_index=True)))
    assert with_ring.price(ring)[0] == pytest.approx(3 * t0, rel=1e-6)  # its own entry
    flat = dict(ring.shape, ring=0)
    assert with_ring.decode_attn(flat, ring.bytes)[0] == pytest.approx(
        pricing.Calibrated(shipped).decode_attn(flat, ring.bytes)[0], rel=0.02)  # not a ring's


def test_a_local_or_sink_layers_prefill_is_priced_by_its_own_kernel():
    """A local layer's prefill attention is keyed by its window (``W``, the band's FLOPs) and a
    sink layer's by ``sink``: measured by the kernel the layer launches (the band kernel), priced
    from those entries once there, and until then as causal SDPA, noted."""
    import pandas as pd

    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from sweep.analysis.fingerprints import family
    from sweep.analysis.needs import needs

    base = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    wl = {"batch": 1, "prompt_len": 8192, "new_tokens": 64}
    mix = base.replace(sliding_window=1024, layer_types="3:1", attn_sinks=True)
    want = needs([(mix, wl, "cudagraph")], "cuda")["prefill_attn"]
    assert set(want) == {("triton", 8192, 64, 4, 32, 1024, 1), ("triton", 8192, 64, 4, 32, 0, 1)}
    assert family("prefill_attn", "triton", True) == "prefill_attn/band"
    att = [k for k in perf.kernel_list(mix, 1, 8192, 8192, "triton") if k.kind == "prefill_attn"]
    local = next(k for k in att if k.shape["W"])
    assert local.flops == 2 * 32 * 64 * 8192 * 1024 and local.shape["sink"] == 1
    shipped = store.shipped("NVIDIA H100 80GB HBM3")
    c = pricing.Calibrated(shipped)
    t_sdpa, basis = c.price(local)
    assert "W=" not in basis and any("not calibrated: priced as causal SDPA" in n for n in c.notes)
    t = 2 * t_sdpa  # the band kernel measured at half SDPA's rate
    row = dict(kind="prefill_attn", impl="triton", T=8192, D=64, G=4, BH=32, W=1024, sink=1,
               flops=local.flops, time_s=t, time_s_min=t, time_s_p90=t)
    c = pricing.Calibrated(shipped.with_(table=pd.concat([shipped.table, pd.DataFrame([row])],
                                                      ignore_index=True)))
    got, basis = c.price(local)
    assert got == pytest.approx(t, rel=1e-9) and "W=1024 sinks" in basis
    full = next(k for k in att if not k.shape["W"])  # a global sink layer: no entry of its kind
    assert c.price(full)[0] == pytest.approx(pricing.Calibrated(shipped).price(full)[0])


def test_a_latent_attention_design_needs_gemvs_of_a_step_and_its_own_decode_entry():
    """A latent-attention design runs on the Triton path where ``kernels=auto`` means Triton (its
    decode through ``kernels.mla_decode``, its projections on the decode GEMV path): its decode
    GEMVs are of a step's rows, never more than the GEMV takes (the H100 calibration of
    2026-11-27 failed on one: M = 576, MLA's up-projection of the whole cache), the absorbed
    ``W_UK`` / ``W_UV`` products GEMVs of the step's rows (``kernels.head_gemv``, priced as the
    one GEMV of their shape; no cuBLAS GEMM), and its decode attention is keyed by
    the latent kernel's shape (``impl`` mla, one latent head shared by every query head, the
    latent's and the RoPE key's widths). A quantized latent cache is refused by name (neither
    path reads one)."""
    from kernels.gemv import MAX_M
    from sweep.analysis.needs import needs
    from zoo import DesignError

    cfg = ModelConfig.from_name("deepseek_v2_lite", dtype="bf16", kv_dtype="bf16")
    assert cfg.resolved("cuda").kernels == "triton"
    got = needs([(cfg, {"batch": 1, "prompt_len": 512, "new_tokens": 64}, "cudagraph")], "cuda")
    assert got["gemv"] and all(k[0] <= MAX_M for k in got["gemv"])
    H, r, nope, v = 16, 512, 128, 128
    assert {(1, H * r, nope, "none", "bf16"), (1, H * v, r, "none", "bf16")} <= set(got["gemv"])
    assert not {(1, H * r, nope, "bf16"), (1, H * v, r, "bf16")} & set(got.get("gemm", ()))
    # the query projection over the latent projection (3072 + 512 + 64 rows), one GEMV with the
    # block's norm in it
    assert (1, 3648, 2048, "norm+res", "bf16") in got["gemv"]
    assert {k[:9] for k in got["decode_attn"]} == {("mla", "bf16", 1, 1, 16, 544, 512, 0, 64)}
    for kernels in ("triton", "torch", "auto"):  # a quantized latent cache: no path reads it
        with pytest.raises(DesignError, match="kv_dtype=int8 with kv_lora_rank"):
            cfg.replace(kv_dtype="int8", kernels=kernels).validate()
    dense = needs([(ModelConfig.from_name("llama3_2_1b"),
                    {"batch": 1, "prompt_len": 512, "new_tokens": 64}, "cudagraph")], "cuda")
    assert dense["gemv"] and all(k[0] <= MAX_M for k in dense["gemv"])


def test_the_latent_decode_micro_benchmark_times_the_models_kernel():
    """``microbench_mla.mla_decode`` on the CPU (the Triton interpreter): the calibration child's
    split of the decode-attention shapes sends ``impl`` mla to it, each row keyed as the kernel
    list keys the model's call (one latent head, ``G`` query heads, ``D`` / ``R`` wide) with the
    cache's bytes; a quantized cache refused by name; its grid is the kernel's own."""
    import os

    from sweep.measure import microbench as mb
    from sweep.measure.microbench_mla import mla_decode, mla_grid

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton kernels run on the CPU under TRITON_INTERPRET=1")
    g = torch.Generator().manual_seed(0)

    def rnd(*shape, dt=torch.float32):
        return torch.randn(*shape, dtype=dt, generator=g)

    grid = mla_grid(quick=True)
    assert {s["impl"] for s in grid} == {"mla"} and all(s["Hkv"] == 1 for s in grid)
    rows = mla_decode("cpu", mb.timer(False, 2), rnd, grid[:2])
    for r, sh in zip(rows, grid):
        assert r["kind"] == "decode_attn" and r["impl"] == "mla" and r["time_s"] > 0
        assert (r["G"], r["S"], r["D"], r["R"]) == (sh["G"], sh["S"], sh["D"], sh["R"])
        assert r["bytes"] == sh["B"] * sh["S"] * (sh["D"] + sh["R"]) * 2  # bf16: the kernel's
    with pytest.raises(ValueError, match="kv_dtype=int8"):
        mla_decode("cpu", mb.timer(False, 2), rnd, [dict(grid[0], kv_dtype="int8")])
