"""Mixtures of experts and QK-norm in the zoo (issue 38): built from real configs, the same
logits as transformers, the published parameter counts, bad designs refused by field."""

import json
import math

import pytest
import torch

from tests.helpers import assert_decodes_like, hf_random_model
from zoo import DesignError, ModelConfig, Transformer, counts
from zoo.moe import SKEW_LAUNCHES, expected_touched
from zoo.routing import expected_blocks
from zoo.weights import load_hf_weights

transformers = pytest.importorskip("transformers")

# tiny designs of each family: routing skewed by the router's random weights, top-k of several,
# Qwen3-MoE with a dense first layer and per-head QK-norm, OLMoE with QK-norm over the projections
CASES = {
    "mixtral": dict(n_experts=4, n_experts_active=2, expert_ffn_dim=48, ffn_dim=48),
    "qwen3_moe": dict(n_experts=8, n_experts_active=3, expert_ffn_dim=40, qk_norm="head",
                      router_renorm=False, first_k_dense=1, head_dim=24),
    "qwen3_moe_renorm": dict(n_experts=6, n_experts_active=2, expert_ffn_dim=40,
                             qk_norm="head"),
    "olmoe": dict(n_experts=6, n_experts_active=2, expert_ffn_dim=32, qk_norm="full",
                  router_renorm=False, n_kv_heads=8),
    "qwen3_dense": dict(qk_norm="head", head_dim=24),
}


def _hf_model(cfg: ModelConfig, seed: int):
    """transformers' model of ``cfg``'s family with random weights: its norms, biases and its
    router too (transformers starts a Qwen3-MoE / OLMoE router at zero: every token would route
    alike)."""
    return hf_random_model(transformers, cfg.to_hf(), seed, router_std=0.05, experts_std=0.05)


def _assert_same(zoo, hf, cfg, steps=4):
    """Prefill and ``steps`` decode steps of the zoo model against ``hf``'s logits (fp32, 1e-4)."""
    assert_decodes_like(zoo, hf, cfg, B=2, T=11, steps=steps, seed=1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case):
    cfg = ModelConfig.from_name("tiny", kernels="torch", **CASES[case])
    hf = _hf_model(cfg, seed=sorted(CASES).index(case))
    assert hf.config.model_type == cfg.to_hf()["model_type"]
    zoo = load_hf_weights(Transformer.build(cfg, "cpu", init=False), dict(hf.state_dict()))
    _assert_same(zoo, hf, cfg)


@pytest.mark.parametrize("case", ["mixtral", "qwen3_moe", "olmoe"])
def test_save_pretrained_round_trip(case, tmp_path):
    """transformers' save_pretrained (its config.json and safetensors, experts in the layout
    it writes) -> ``ModelConfig.from_hf`` -> ``load_hf_weights``: the same design and logits."""
    cfg = ModelConfig.from_name("tiny", kernels="torch", **CASES[case])
    hf = _hf_model(cfg, seed=11)
    hf.save_pretrained(tmp_path)
    back = ModelConfig.from_hf(tmp_path, dtype="fp32", kv_dtype="fp32", kernels="torch")
    keys = ("n_experts", "n_experts_active", "expert_ffn_dim", "router_renorm", "first_k_dense",
            "qk_norm", "n_layers", "head_dim")
    assert {k: getattr(back, k) for k in keys} == {k: getattr(cfg, k) for k in keys}
    _assert_same(load_hf_weights(Transformer.build(back, "cpu", init=False), tmp_path), hf, back)


def test_published_per_expert_layouts_load_alike():
    """A checkpoint as published (Mixtral's ``block_sparse_moe.experts.{e}.w1/w3/w2``, Qwen3-MoE's
    and OLMoE's ``mlp.experts.{e}.gate_proj/up_proj/down_proj``) loads the same weights as
    transformers 5's stacked ``gate_up_proj`` / ``down_proj``."""
    for case, names in (("mixtral", ("block_sparse_moe", "w1", "w3", "w2")),
                        ("olmoe", ("mlp", "gate_proj", "up_proj", "down_proj"))):
        cfg = ModelConfig.from_name("tiny", kernels="torch", **CASES[case])
        sd = dict(_hf_model(cfg, seed=5).state_dict())
        mod, g, u, dn = names
        split = {}
        for k, v in sd.items():
            if k.endswith("mlp.experts.gate_up_proj"):
                base = k.removesuffix("mlp.experts.gate_up_proj") + mod + ".experts."
                for e in range(cfg.n_experts):
                    gate, up = v[e].chunk(2)
                    split[f"{base}{e}.{g}.weight"], split[f"{base}{e}.{u}.weight"] = gate, up
            elif k.endswith("mlp.experts.down_proj"):
                base = k.removesuffix("mlp.experts.down_proj") + mod + ".experts."
                for e in range(cfg.n_experts):
                    split[f"{base}{e}.{dn}.weight"] = v[e]
            elif k.endswith("mlp.gate.weight"):
                split[k.removesuffix("mlp.gate.weight") + mod + ".gate.weight"] = v
            else:
                split[k] = v
        a = load_hf_weights(Transformer.build(cfg, "cpu", init=False), sd).state_dict()
        b = load_hf_weights(Transformer.build(cfg, "cpu", init=False), split).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), case


# published totals and active parameters (model cards / papers), given to 0.1B: Mixtral-8x7B
# 46.7B / 12.9B (Jiang et al. 2024, arXiv:2401.04088); Qwen3-30B-A3B 30.5B / 3.3B (Qwen3 model
# card); OLMoE-1B-7B 6.9B / 1.3B (Muennighoff et al. 2024, arXiv:2409.02060). The totals agree
# within 1%; an active count within the figure's last digit (Qwen's 3.35B reads "3.3B", OLMoE's
# 1.28B "1.3B": 1.6% and 1.4% from the rounded figure, 0.05B and 0.02B)
PUBLISHED = {"mixtral_8x7b": (46.7e9, 12.9e9), "qwen3_30b_a3b": (30.5e9, 3.3e9),
             "olmoe_1b_7b": (6.9e9, 1.3e9)}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_configs_have_the_published_parameter_counts(name):
    cfg = ModelConfig.from_name(name)
    assert cfg.moe and cfg.resolved("cuda").kernels == "triton"
    from zoo.model import _shapes_only

    with torch.device("meta"), _shapes_only():
        model = Transformer(cfg.resolved("cpu"))
    numel = sum(p.numel() for p in model.parameters())
    p = counts.params(cfg)
    assert p.total == numel
    total, active = PUBLISHED[name]
    assert abs(p.total / total - 1) < 0.01 and abs(p.active - active) < 0.1e9, \
        (p.total, p.active)


def test_touched_experts_and_the_bytes_a_decode_step_reads():
    """Decode reads the experts its tokens route to: at batch 1 the k active ones (no more), at a
    large batch nearly all; the weight bytes follow, between the active and the total."""
    assert expected_touched(64, 8, 1) == pytest.approx(8)
    assert expected_touched(64, 8, 512) == pytest.approx(64, rel=1e-6)
    cfg = ModelConfig.from_name("olmoe_1b_7b")
    p = counts.params(cfg)
    one, many = (counts.decode_step(cfg, b, 512).bytes["weights"] / 2 for b in (1, 256))
    emb_rows = cfg.d_model  # one token's embedding row
    assert one == pytest.approx(p.active - p.embedding + emb_rows, rel=1e-9)
    assert p.active < many < p.total


def test_an_moe_stages_bytes_follow_the_experts_it_was_measured_to_touch():
    """A prompt whose tokens reached 40 of Qwen3-30B-A3B's 128 experts a layer (random weights
    route so: max/mean load 15.6 on the H100) read 88 experts' weights a layer less than the
    uniform routing expects: the row's minimum bytes (and MBU) say so, the expected count kept
    beside; a dense design's are the analytic ones."""
    from sweep.analysis.derived import derived
    from sweep.analysis.hardware import load_spec

    cfg = ModelConfig.from_name("qwen3_30b_a3b")
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 64}
    meas = {"ttft_ms": 19.0, "decode_tpot_ms": 4.0, "moe_prefill_experts_touched": 40.0,
            "moe_prefill_experts_touched_expected": expected_touched(128, 8, 512),
            "moe_decode_experts_touched": 8.0, "moe_decode_experts_touched_expected": 8.0}
    row = derived(cfg, wl, meas, load_spec("h100_sxm"), {"copy_bytes_s": 2.95e12})
    one_expert = 48 * 3 * 2048 * 768 * 2  # bytes of one expert in each of the 48 layers, bf16
    assert counts.expert_bytes(cfg) == one_expert
    gap = row["prefill_min_bytes_expected"] - row["prefill_min_bytes"]
    assert gap == pytest.approx((expected_touched(128, 8, 512) - 40) * one_expert)
    assert row["decode_min_bytes"] == row["decode_min_bytes_expected"]
    assert row["prefill_arith_intensity"] == pytest.approx(
        row["prefill_flops"] / row["prefill_min_bytes"])  # the row's figures agree
    assert row["prefill_mbu_vs_measured"] == pytest.approx(
        row["prefill_min_bytes"] / 19e-3 / 2.95e12)
    dense = ModelConfig.from_name("llama3_2_1b")
    assert counts.expert_bytes(dense) == 0
    assert "prefill_min_bytes_expected" not in derived(dense, wl, {"ttft_ms": 1.0,
                                                                    "decode_tpot_ms": 1.0},
                                                       load_spec("h100_sxm"), {})


@pytest.mark.parametrize("over,field", [
    (dict(n_experts=4, n_experts_active=5, expert_ffn_dim=32), "n_experts_active"),
    (dict(n_experts=4, n_experts_active=2), "expert_ffn_dim"),
    (dict(n_experts=4, expert_ffn_dim=32), "n_experts_active"),
    (dict(n_experts_active=2), "n_experts_active=2 needs n_experts"),
    (dict(n_experts=4, n_experts_active=2, expert_ffn_dim=32, first_k_dense=2), "first_k_dense"),
    (dict(n_experts=4, n_experts_active=2, expert_ffn_dim=32, kv_dtype="int8",
          kernels="torch"), "kv_dtype=int8 needs kernels='triton'"),
    (dict(n_experts=4, n_experts_active=2, expert_ffn_dim=32, ffn_type="gelu"), "ffn_type"),
    (dict(n_experts=-1), "n_experts"),
    (dict(qk_norm="layer"), "qk_norm"),
])
def test_bad_moe_designs_are_refused_by_field(over, field):
    with pytest.raises(DesignError, match=field):
        ModelConfig.from_name("tiny", **over).validate()


def test_moe_modes_on_a_gpu():
    """The Triton MoE layer is graphed (no host sync); the torch one syncs for its experts'
    token counts (eager only); neither is a custom op for torch.compile yet."""
    from sweep.plan import check_mode

    gpu = {"type": "cuda", "name": "GPU"}
    moe = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    assert moe.kernels == "triton"
    check_mode("cudagraph", gpu, moe)
    with pytest.raises(DesignError, match="mode=compile with n_experts=64"):
        check_mode("compile", gpu, moe)
    with pytest.raises(DesignError, match="mode=cudagraph with n_experts=64 and kernels=torch"):
        check_mode("cudagraph", gpu, moe.replace(kernels="torch"))
    check_mode("eager", gpu, moe.replace(kernels="torch"))
    check_mode("cudagraph", {"type": "predict", "name": "h100"}, moe.replace(kernels="torch"))


@pytest.mark.parametrize("extra,message", [
    ({"decoder_sparse_step": 2}, "decoder_sparse_step=2"),
    ({"mlp_only_layers": [1]}, r"mlp_only_layers=\[1\]"),
    ({"clip_qkv": 8.0}, "clip_qkv=8.0"),
    ({"model_type": "qwen2_moe"}, "model_type='qwen2_moe' is not supported"),
])
def test_hf_moe_features_the_zoo_does_not_run_are_refused_by_key(extra, message):
    hf = json.loads((__import__("zoo").config.CONFIG_DIR / "qwen3_30b_a3b.json").read_text())
    with pytest.raises(DesignError, match=message):
        ModelConfig.from_hf(dict(hf, **extra))


@pytest.mark.parametrize("extra,message", [
    ({"num_experts_per_tok": 200}, r"n_experts_active \(200\) must not exceed n_experts \(128\)"),
    ({"num_key_value_heads": 5}, r"must be a multiple of n_kv_heads \(5\)"),
    # named by the file's key, before it is read as n_heads
    ({"num_attention_heads": "32"}, "config.json: num_attention_heads='32' must be an integer"),
])
def test_an_impossible_hf_design_is_refused_by_field_on_reading(extra, message):
    """``from_hf`` validates what it read (an active count above the total was returned, and
    counted: 46.8B active of 30.5B)."""
    hf = json.loads((__import__("zoo").config.CONFIG_DIR / "qwen3_30b_a3b.json").read_text())
    with pytest.raises(DesignError, match=message):
        ModelConfig.from_hf(dict(hf, **extra))


@pytest.mark.parametrize("config,key", [("qwen3_30b_a3b", "moe_intermediate_size"),
                                        ("qwen3_30b_a3b", "num_experts_per_tok"),
                                        ("olmoe_1b_7b", "intermediate_size"),
                                        ("mixtral_8x7b", "hidden_size")])
def test_an_hf_moe_config_missing_a_key_its_family_writes_is_refused_by_key(config, key):
    hf = json.loads((__import__("zoo").config.CONFIG_DIR / f"{config}.json").read_text())
    hf.pop(key)
    with pytest.raises(DesignError, match=f"has no '{key}'"):
        ModelConfig.from_hf(hf)


def test_a_dense_designs_study_identity_is_unchanged_by_the_moe_fields():
    """The fields added for mixtures of experts and QK-norm enter a study's identity only where
    set: a dense design's identity (and so its study's name) stays what it was."""
    from zoo.config import LATER_FIELDS

    dense = ModelConfig.from_name("llama3_2_1b")
    assert not set(LATER_FIELDS) & set(dense.identity_dict())
    moe = ModelConfig.from_name("olmoe_1b_7b")
    assert {"n_experts", "n_experts_active", "expert_ffn_dim", "qk_norm",
            "router_renorm"} <= set(moe.identity_dict())
    assert dense.identity_dict() == {k: v for k, v in dense.to_dict().items()
                                     if k not in LATER_FIELDS}


def test_a_quantized_weight_format_prices_fewer_expert_bytes():
    """``weight_dtype`` (predicted only) reaches the MoE experts' kernels: their bytes at the
    format's bits, priced below the bf16 design's."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from sweep.analysis.hardware import load_spec

    cal = pricing.Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    cfg = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    q4 = cfg.replace(weight_dtype="q4_0")
    ups = [next(k for k in perf.kernel_list(c, 8, 1, 600, "triton") if k.op == "moe_up")
           for c in (cfg, q4)]
    assert ups[1].bytes < 0.35 * ups[0].bytes
    wl = {"batch": 8, "prompt_len": 512, "new_tokens": 64}
    full, quant = (perf.predict(c, wl, load_spec("h100_sxm"), cal)["decode_pred_ms_ffn"]
                   for c in (cfg, q4))
    assert quant < 0.6 * full


def test_to_hf_refuses_what_no_moe_family_holds():
    cfg = ModelConfig.from_name("tiny", n_experts=4, n_experts_active=2, expert_ffn_dim=32)
    with pytest.raises(DesignError, match="qkv_bias with n_experts"):
        cfg.replace(qkv_bias=True).to_hf()
    with pytest.raises(DesignError, match="no Hugging Face family holds"):
        cfg.replace(router_renorm=False).to_hf()  # Mixtral renormalises always


def test_the_grouped_gemms_are_priced_by_their_own_entries():
    """A study of an MoE design on the Triton path needs ``moe_gemm`` entries keyed by the step's
    tokens, experts, top-k and expert weight (prefill and decode); once the calibration holds
    them, the predictor prices ``moe_up`` / ``moe_down`` from them (interpolated in log tokens,
    scaled by a transfer), not from the cuBLAS GEMM proxy."""
    import pandas as pd

    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from sweep.analysis.needs import KEYS, needs

    cfg = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    wl = {"batch": 8, "prompt_len": 512, "new_tokens": 64}
    want = needs([(cfg, wl, "cudagraph")], "cuda")["moe_gemm"]
    E, k, d, Fe = (cfg.n_experts, cfg.n_experts_active, cfg.d_model, cfg.expert_ffn_dim)
    # the decode step's 8 tokens, the prefill's 4096 and its bracket (needs.moe_bracket)
    assert set(want) == {(op, M, E, k, N, K, "bf16") for M in (8, 8 * 512, 8 * 512 * E // k)
                         for op, N, K in (("moe_up", 2 * Fe, d), ("moe_down", d, Fe))} | {
        ("router_route", 8, E, k, E, d, "bf16")}  # a decode step of 8: the router in one launch
    assert KEYS["moe_gemm"] == ("op", "M", "E", "k", "N", "K", "dtype")

    base = store.shipped("NVIDIA H100 80GB HBM3")  # without its moe_gemm entries (the reship of
    base = base.with_(table=base.table[base.table.kind != "moe_gemm"])  # 2026-11-27g has them)
    up = next(x for x in perf.kernel_list(cfg, 8, 1, 600, "triton") if x.op == "moe_up")
    proxy, proxy_basis = pricing.Calibrated(base).price(up)
    assert "rows stacked" in proxy_basis
    rows = [{"kind": "moe_gemm", "op": "moe_up", "M": m, "E": E, "k": k, "N": 2 * Fe, "K": d,
             "dtype": "bf16", "time_s": t, "time_s_min": t, "time_s_p90": t}
            for m, t in ((4, 20e-6), (16, 80e-6))]
    cal = pricing.Calibrated(base.with_(table=pd.concat([base.table, pd.DataFrame(rows)],
                                                     ignore_index=True)))
    t, basis = cal.price(up)
    assert basis.startswith("moe_gemm moe_up") and t == pytest.approx(40e-6, rel=1e-6)  # log-log
    down = next(x for x in perf.kernel_list(cfg, 8, 1, 600, "triton") if x.op == "moe_down")
    assert cal.price(down) == pricing.Calibrated(base).price(down)  # no entry of its own: proxy
    fast = pricing.Calibrated(cal.calibration, {"compute": 0.5, "memory": 0.25, "ridge": 300.0})
    assert fast.price(up)[0] == pytest.approx(10e-6, rel=1e-6)  # a decode step: memory-bound
    # entries whose draw touched twice the bytes this step expects: the same rate, half the time
    two = pd.DataFrame([dict(r, bytes=2 * up.bytes) for r in rows])
    cal2 = pricing.Calibrated(base.with_(table=pd.concat([base.table, two], ignore_index=True)))
    assert cal2.price(up)[0] == pytest.approx(20e-6, rel=1e-6)


def test_the_grouped_gemm_micro_benchmark_times_the_models_kernels():
    """``moe_gemms`` on the CPU (the Triton interpreter): each shape's row with its FLOPs, the
    experts its uniform routing touched and their bytes; a wrong op refused by name."""
    import os

    from sweep.measure import microbench as mb
    from sweep.measure.microbench_moe import moe_gemms

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton kernels run on the CPU under TRITON_INTERPRET=1")
    g = torch.Generator().manual_seed(0)

    def rnd(*shape, dt=torch.float32):
        return torch.randn(*shape, dtype=dt, generator=g)

    shapes = [dict(op="moe_up", M=3, E=4, k=2, N=32, K=16, dtype="fp32"),
              dict(op="moe_down", M=3, E=4, k=2, N=16, K=16, dtype="fp32")]
    rows = moe_gemms("cpu", mb.timer(False, 2), rnd, shapes)
    assert [r["op"] for r in rows] == ["moe_up", "moe_down"]
    for r, sh in zip(rows, shapes):
        assert r["kind"] == "moe_gemm" and r["flops"] == 2 * 3 * 2 * sh["N"] * sh["K"]
        assert 2 <= r["touched"] <= 4 and r["time_s"] > 0
        assert r["bytes"] >= r["touched"] * sh["N"] * sh["K"] * 4
    with pytest.raises(ValueError, match="moe_up, moe_down or router_route"):
        moe_gemms("cpu", mb.timer(False, 2), rnd, [dict(shapes[0], op="moe_gate")])


def test_the_grouped_gemm_entries_read_the_touched_experts_cold(monkeypatch):
    """The copies a ``moe_gemm`` entry rotates through are sized by the bytes one call reads (the
    touched experts' weights), so a step's few experts are not read from L2 when they fit it
    while the whole tensor does not."""
    import os

    from sweep.measure import microbench as mb
    from sweep.measure import microbench_moe

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton kernels run on the CPU under TRITON_INTERPRET=1")
    asked = []
    monkeypatch.setattr(microbench_moe, "cold_copies",
                        lambda nbytes, cuda, cap=64: asked.append(nbytes) or 1)
    g = torch.Generator().manual_seed(1)

    def rnd(*shape, dt=torch.float32):
        return torch.randn(*shape, dtype=dt, generator=g)

    rows = microbench_moe.moe_gemms("cpu", mb.timer(False, 2), rnd,
                                    [dict(op="moe_down", M=1, E=16, k=2, N=16, K=8, dtype="fp32")])
    assert rows[0]["touched"] == 2 and asked == [2 * 16 * 8 * 4]  # not 16 experts' bytes


def test_routing_skew_draws_each_tokens_experts_from_the_zipf_prior():
    """``routing_skew`` (a workload fact, ``zoo.routing``): at 0 the router as built (uniform
    inclusion ``k / E``, the touched-experts formula unchanged); above it each token's ``k``
    experts are drawn from ``p_e ~ (e + 1)^-s``: the model's draws (eager, CPU) include each
    expert as often as ``inclusion`` says, fewer experts are touched and the busiest gets more;
    the counts and the predictor read fewer expert bytes; a negative skew is refused."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from sweep.analysis.hardware import load_spec
    from zoo import routing
    from zoo.experts import MoEFeedForward, set_routing_skew

    assert routing.inclusion(8, 2, 0.0) == (0.25,) * 8
    q = routing.inclusion(8, 2, 1.5)
    assert sum(q) == pytest.approx(2, abs=1e-9) and list(q) == sorted(q, reverse=True)
    assert routing.expected_touched(64, 8, 8) == pytest.approx(expected_touched(64, 8, 8))
    assert routing.expected_touched(64, 8, 8, 1.0) < routing.expected_touched(64, 8, 8) - 5
    assert routing.load_max_over_mean(64, 8) == pytest.approx(1.0)
    assert 1 < routing.load_max_over_mean(64, 8, 0.5) < routing.load_max_over_mean(64, 8, 1.0)
    with pytest.raises(ValueError, match="routing_skew must be >= 0"):
        routing.inclusion(8, 2, -1.0)

    cfg = ModelConfig.from_name("tiny", n_experts=8, n_experts_active=2, expert_ffn_dim=32,
                                kernels="torch", dtype="fp32")
    torch.manual_seed(0)
    model = Transformer.build(cfg, "cpu", seed=0)
    assert set_routing_skew(model, 1.5) == cfg.n_layers
    layer = next(m for m in model.modules() if isinstance(m, MoEFeedForward))
    layer.record = []
    with torch.no_grad():
        layer(torch.randn(1, 4000, cfg.d_model))
    got = torch.bincount(layer.record[0].reshape(-1), minlength=8).float() / 4000
    assert torch.allclose(got, torch.tensor(q), atol=0.03), (got, q)
    with pytest.raises(ValueError, match="routing_skew must be >= 0"):
        set_routing_skew(model, -0.5)

    big = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    assert counts.decode_mean(big, 8, 512, 64, 1.0).min_bytes < \
        0.8 * counts.decode_mean(big, 8, 512, 64).min_bytes
    cal = pricing.Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    wl = {"batch": 8, "prompt_len": 512, "new_tokens": 64}
    flat, skewed = (perf.predict(big, dict(wl, routing_skew=s), load_spec("h100_sxm"), cal)
                    for s in (0.0, 1.0))
    assert skewed["decode_pred_ms_ffn"] < 0.8 * flat["decode_pred_ms_ffn"]


def test_a_trial_records_how_its_tokens_were_routed():
    """``sweep.measure.moe_routing.routing_stats`` after a run: the busiest expert's load and the
    experts a decode step touched, measured, beside what the skew expects; nothing for a dense
    design; a study's identity is unchanged by an unset skew."""
    from sweep.config.identity import identity
    from sweep.measure.moe_routing import routing_stats
    from zoo import Generator
    from zoo.experts import set_routing_skew

    cfg = ModelConfig.from_name("tiny", n_experts=8, n_experts_active=2, expert_ffn_dim=32,
                                kernels="torch", dtype="fp32")
    for skew in (0.0, 2.0):
        model = Transformer.build(cfg, "cpu", seed=0)
        set_routing_skew(model, skew)
        gen = Generator(model, 4, 40)
        prompt = torch.randint(0, cfg.vocab_size, (4, 32), generator=torch.Generator().manual_seed(0))
        tok = gen.prefill(prompt).argmax(-1, keepdim=True)
        got = routing_stats(gen, prompt, tok, skew)
        assert 1 <= got["moe_decode_experts_touched"] <= 8
        assert 2 <= got["moe_prefill_experts_touched"] <= 8
        assert got["moe_prefill_load_max_over_mean"] >= 1
        assert got["moe_decode_experts_touched_expected"] == pytest.approx(
            expected_touched(8, 2, 4, skew))
        assert got["moe_prefill_experts_touched_expected"] == pytest.approx(
            expected_touched(8, 2, 4 * 32, skew))
        # 256 slots (block of 16 rows, zoo.moe.block_rows) over 8 experts: at least 16 blocks,
        # one more per expert at most; a decode step's 8 slots: one block per touched expert
        assert 16 <= got["moe_prefill_blocks"] <= 16 + 8
        assert got["moe_decode_blocks"] == got["moe_decode_experts_touched"]
        assert got["moe_prefill_blocks_expected"] == pytest.approx(
            expected_blocks(8, 2, 4 * 32, 16, skew))
        if skew:  # the head of the prior takes most of the 256 slots
            assert got["moe_prefill_load_max_over_mean"] > 2
    dense = Transformer.build(ModelConfig.from_name("tiny", kernels="torch", dtype="fp32"), "cpu")
    g = Generator(dense, 1, 8)
    p = torch.zeros(1, 4, dtype=torch.long)
    assert routing_stats(g, p, g.prefill(p).argmax(-1, keepdim=True)) == {}
    args = (cfg, None, "eager", None, type("S", (), {"name": "cpu"})(), {"name": "cpu"}, {}, 0,
            {}, {}, [])
    wl = {"batch": 1, "prompt_len": 8, "new_tokens": 4}
    assert identity(*args[:1], wl, *args[2:]) == identity(*args[:1], dict(wl, routing_skew=0.0),
                                                          *args[2:])
    assert identity(*args[:1], wl, *args[2:]) != identity(*args[:1], dict(wl, routing_skew=1.0),
                                                          *args[2:])


def test_the_moe_layers_small_kernels_have_entries_of_their_own():
    """The Triton path's fused routing (``route_align``) and the slots' sum (``moe_sum``) are
    kernels of the decode step's list with ``elementwise`` entries of their own (measured by
    ``microbench.elementwise``); a calibration without them prices them as before (a graph launch;
    the ``residual`` add's entry), with them by them."""
    import pandas as pd

    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from sweep.measure import microbench as mb

    cfg = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    ks = perf.kernel_list(cfg, 16, 1, 600, "triton")  # 16 tokens: route_align, the sum after
    route = next(x for x in ks if x.op == "route_align")
    total = next(x for x in ks if x.op == "moe_sum")
    assert route.shape["impl"] == "triton" and route.launches == 1 and route.repeat == 16
    assert not any(x.op == "router" and x.kind == "elementwise" for x in ks)  # one kernel, fused
    base = store.shipped("NVIDIA H100 80GB HBM3")  # without its route_align / moe_sum entries
    t = base.table  # (the reship of 2026-11-27g measured them)
    base = base.with_(table=t[~t.op.isin(["route_align", "moe_sum"])])
    c = pricing.Calibrated(base)
    t, basis = c.price(route)
    assert t == pytest.approx(c.launch("graph_kernel")) and "fused softmax" in basis
    residual = c.linear("elementwise", {"op": "residual", "impl": "torch"}, total.bytes)[0]
    assert c.price(total)[0] == pytest.approx(residual)
    rows = [{"kind": "elementwise", "op": "route_align", "impl": "triton", "bytes": b, "M": m,
             "time_s": s, "time_s_min": s, "time_s_p90": s}
            for m, b, s in ((1, 1e3, 4e-6), (64, 3e5, 8e-6))]  # 16 tokens: 7.5e4 bytes
    cal = pricing.Calibrated(base.with_(table=pd.concat([base.table, pd.DataFrame(rows)],
                                                     ignore_index=True)))
    t2, basis2 = cal.price(route)
    assert basis2.startswith("elementwise route_align/triton") and 4e-6 <= t2 <= 8e-6
    g = torch.Generator().manual_seed(0)
    got = mb.elementwise("cpu", mb.timer(False, 2), lambda *s, dt=torch.float32: torch.randn(
        *s, dtype=dt, generator=g), quick=True)
    sums = [r for r in got if r["op"] == "moe_sum"]
    assert [r["M"] for r in sums] == [1, 16, 256]
    assert all(r["bytes"] == (9 * r["M"]) * 128 * 4 for r in sums)


def test_a_decode_step_of_few_tokens_routes_in_one_launch_and_sums_in_the_down_gemm(monkeypatch):
    """At most 8 tokens (``zoo.moe.ROUTER_ROUTE_MAX_TOKENS``): the router's GEMM, routing and sort
    are one ``router_route`` kernel (under a routing skew too: the draw is made in it) and the
    slots' sum runs inside ``moe_down`` (no ``moe_sum``); at 16 tokens neither. Without a
    ``router_route`` entry it is priced as the two launches it replaces, noted; with entries, by
    them. ``moe_gemms`` times it (and ``moe_down`` with the sum)
    as the model launches it."""
    import os

    import pandas as pd

    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from zoo import moe as zoo_moe

    cfg = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    E, k, d = cfg.n_experts, cfg.n_experts_active, cfg.d_model
    for B, one in ((1, True), (8, True), (16, False)):
        ops = [x.op for x in perf.kernel_list(cfg, B, 1, 600, "triton")]
        assert ("router_route" in ops) == one and ("moe_sum" not in ops) == one, (B, ops)
        assert ("route_align" in ops) != one and ops.count("moe_down") == 1
    skewed = [x.op for x in perf.kernel_list(cfg, 1, 1, 600, "triton", skew=1.0)]
    assert skewed == [x.op for x in perf.kernel_list(cfg, 1, 1, 600, "triton")]
    wide = [x.op for x in perf.kernel_list(cfg.replace(n_experts=384), 1, 1, 600, "triton")]
    assert "router_route" not in wide and "moe_sum" in wide  # past route_align's experts: the
    # model routes with torch's ops and sums after (zoo.experts), and so does the list
    rr = next(x for x in perf.kernel_list(cfg, 1, 1, 600, "triton") if x.op == "router_route")
    assert rr.kind == "gemm" and rr.shape["N"] == E and rr.shape["K"] == d and rr.repeat == 16
    assert rr.flops == 2 * 1 * E * d and rr.bytes == E * d * 2 + (E + d) * 2
    base = store.shipped("NVIDIA H100 80GB HBM3")
    base = base.with_(table=base.table[base.table.op != "router_route"])
    c = pricing.Calibrated(base)
    t, basis = c.price(rr)
    router = next(x for x in perf.kernel_list(cfg, 16, 1, 600, "triton") if x.op == "router")
    gemm = c.gemm(dict(router.shape, M=1))[0]  # the router's GEMM as the two launches price it
    monkeypatch.setattr(zoo_moe, "ROUTER_ROUTE_MAX_TOKENS", 0)  # the two launches at 1 token
    two = perf.kernel_list(cfg, 1, 1, 600, "triton")
    monkeypatch.undo()
    route = next(x for x in two if x.op == "route_align")
    assert t == pytest.approx(gemm + c.price(route)[0]) and "as router_route" in basis
    one = [x for x in two if x.op == "router"]
    assert t == pytest.approx(c.price(one[0])[0] + c.price(route)[0])  # = the two launches
    assert any("router_route" in n for n in c.notes)
    rows = [{"kind": "moe_gemm", "op": "router_route", "M": m, "E": E, "k": k, "N": E, "K": d,
             "dtype": "bf16", "time_s": s, "time_s_min": s, "time_s_p90": s}
            for m, s in ((1, 8e-6), (8, 10e-6))]
    cal = pricing.Calibrated(base.with_(table=pd.concat([base.table, pd.DataFrame(rows)],
                                                     ignore_index=True)))
    t2, basis2 = cal.price(rr)
    assert basis2.startswith("moe_gemm router_route") and t2 == pytest.approx(8e-6)
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from sweep.measure import microbench as mb
    from sweep.measure.microbench_moe import moe_gemms

    g = torch.Generator().manual_seed(0)
    got = moe_gemms("cpu", mb.timer(False, 2), lambda *s, dt=torch.float32: torch.randn(
        *s, dtype=dt, generator=g), [dict(op="router_route", M=2, E=8, k=2, N=8, K=24,
                                          dtype="fp32")])
    assert got[0]["op"] == "router_route" and got[0]["flops"] == 2 * 2 * 8 * 24
    assert got[0]["bytes"] == (8 * 24 + 2 * (8 + 24)) * 4 and got[0]["time_s"] > 0
    with pytest.raises(ValueError, match="router_route's N"):
        moe_gemms("cpu", mb.timer(False, 2), lambda *s, dt=torch.float32: torch.randn(*s),
                  [dict(op="router_route", M=2, E=8, k=2, N=16, K=24, dtype="fp32")])


def test_uniform_routing_draws_every_tokens_experts_uniformly():
    """``workload.routing=uniform``: each token's experts drawn uniformly (the Zipf prior of
    exponent 0) instead of the random router's choice, which sends much of a long prompt to a
    few experts (``results/reference/moe_h100.md``): a tiny model's prompt then reaches every
    expert with near-even loads; a trial records it; the kernel list holds the draw's ops where
    the Triton routing does not make the draw inside its launch (past 256 experts); a study's
    identity names it only when set; ``uniform`` with a skew, or another value, refused by field
    name."""
    from dataclasses import replace

    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing
    from sweep.config.identity import identity
    from sweep.config.schema import WorkloadConf
    from sweep.measure.moe_routing import routing_stats
    from sweep.plan import check_workload
    from zoo import Generator
    from zoo.experts import MoEFeedForward, set_routing_skew

    cfg = ModelConfig.from_name("tiny", n_experts=8, n_experts_active=2, expert_ffn_dim=32,
                                kernels="torch", dtype="fp32")
    model = Transformer.build(cfg, "cpu", seed=0)
    assert set_routing_skew(model, 0.0, draw=True) == cfg.n_layers >= 2
    layer = next(m for m in model.modules() if isinstance(m, MoEFeedForward))
    assert torch.allclose(layer.log_prior, torch.full((8,), -math.log(8)))  # a flat prior
    seeds = [m.seed.item() for m in model.modules() if isinstance(m, MoEFeedForward)]
    assert all(b - a > 2**31 for a, b in zip(seeds, seeds[1:]))  # the layers' Philox keys apart
    layer.record = []
    with torch.no_grad():
        layer(torch.zeros(1, 4000, cfg.d_model))  # one input for every token: the router would
    got = torch.bincount(layer.record[0].reshape(-1), minlength=8).float() / 4000  # pick 2
    assert torch.allclose(got, torch.full((8,), 0.25), atol=0.03), got
    layer.record = None
    gen = Generator(model, 4, 40)
    prompt = torch.randint(0, cfg.vocab_size, (4, 32), generator=torch.Generator().manual_seed(0))
    stats = routing_stats(gen, prompt, gen.prefill(prompt).argmax(-1, keepdim=True), 0.0)
    assert stats["moe_prefill_experts_touched"] == 8 and stats["moe_prefill_load_max_over_mean"] < 2
    assert set_routing_skew(model, 0.0) and layer.log_prior is None  # the router as built again

    big = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    wide = big.replace(n_experts=384)  # past route_rows' experts: torch's top-k and draw
    for cfg_, new, ops in ((big, 1, 0), (big, 600, 0), (wide, 600, SKEW_LAUNCHES - 1)):
        # (past 256 experts: the draw's ops, and one cast fewer: the drawn logits are float32)
        plain, drawn = (perf.kernel_list(cfg_, 1, new, 600, "triton", draw=x) for x in (0, 1))
        extra = sum(x.launches * x.repeat for x in drawn) - sum(x.launches * x.repeat for x in plain)
        assert extra == ops * big.n_layers, (new, extra)
    pre = {x.op: x for x in perf.kernel_list(big, 1, 600, 600, "triton")}
    assert pre["route_rows"].launches == 1 and pre["moe_align"].launches == 2
    assert pre["moe_align"].bytes == 20 * 600 * 8 + 4 * (4800 // 64 + 64) * 64
    shipped = store.shipped("NVIDIA H100 80GB HBM3")
    t = shipped.table
    own = t[(t.kind == "elementwise") & t.op.isin(["moe_align", "route_rows"])]
    assert len(own)  # measured since 2026-12-06: each priced from its own entries
    # without them (a calibration from before), the sort's two launches are priced as two of
    # route_rows' stand-in launch
    cal = pricing.Calibrated(shipped.with_(table=t.drop(own.index).reset_index(drop=True)))
    tiny_ = cal.price(pre["moe_align"])
    assert tiny_[0] == pytest.approx(2 * cal.price(replace(pre["moe_align"], op="route_rows",
                                                            launches=1))[0])
    measured = pricing.Calibrated(shipped).price(pre["moe_align"])[0]
    assert measured != pytest.approx(tiny_[0]) and 0 < measured < 1e-3
    assert perf.kernel_list(big, 1, 1, 600, "triton", skew=1.0) == \
        perf.kernel_list(big, 1, 1, 600, "triton", skew=1.0, draw=True)

    wl = {f: getattr(WorkloadConf(), f) for f in ("batch", "prompt_len", "new_tokens", "warmup",
                                                  "repeats", "timeout_s", "routing_skew",
                                                  "routing")}
    wl.update(prompt_len=64, new_tokens=16)  # inside the tiny design's max_seq_len
    check_workload(dict(wl, routing="uniform"), cfg, {})
    for bad, field in ((dict(routing="balanced"), "workload.routing='balanced'"),
                       (dict(routing="uniform", routing_skew=1.0), "workload.routing=uniform")):
        with pytest.raises(ValueError, match=field):
            check_workload(dict(wl, **bad), cfg, {})
    # a routing for a study none of whose designs has experts: refused, named (it would change
    # nothing but the row's label and the study's identity)
    dense = cfg.replace(n_experts=0, n_experts_active=0, expert_ffn_dim=0)
    for bad, space, field in ((dict(routing="uniform"), {}, "workload.routing routes"),
                              (dict(routing_skew=1.0), {}, "workload.routing_skew routes"),
                              ({}, {"routing_skew": {"choices": [0.0, 1.0]}},
                               "workload.routing_skew routes")):
        with pytest.raises(ValueError, match=field):
            check_workload(dict(wl, **bad), dense, space)
    check_workload(dict(wl, routing_skew=1.0), dense, {"ffn": {"choices": {  # a space with experts
        "dense": {"n_experts": 0}, "E4": {"n_experts": 4, "n_experts_active": 2}}}})
    args = (cfg, None, "eager", None, type("S", (), {"name": "cpu"})(), {"name": "cpu"}, {}, 0,
            {}, {}, [])
    assert identity(*args[:1], wl, *args[2:]) == identity(*args[:1], dict(wl, routing="router"),
                                                          *args[2:])
    assert "routing" not in str(identity(*args[:1], wl, *args[2:])["workload"])
    assert identity(*args[:1], wl, *args[2:]) != identity(*args[:1], dict(wl, routing="uniform"),
                                                          *args[2:])
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.targets import predict_designs

    rows = predict_designs([(big, dict(wl, routing="uniform"), "cudagraph")], load_spec("h100_sxm"))
    assert rows[0]["routing"] == "uniform"  # a predicted row names it, as a measured one does


def test_the_routers_small_ops_are_priced_without_a_cuda_graph():
    """A calibration with no CUDA graph (the CPU's: no ``graph_kernel`` launch cost) prices the
    torch path's router ops as tiny ops issued eagerly (``eager_op``), so an MoE design measured
    on the CPU gets a calibrated prediction like a dense one (it got none before)."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import predict as perf
    from sweep.analysis import pricing

    base = store.shipped("NVIDIA H100 80GB HBM3")
    no_graph = base.with_(table=base.table[~((base.table.kind == "launch")
                                             & (base.table.op == "graph_kernel"))])
    cfg = ModelConfig.from_name("olmoe_1b_7b").replace(kernels="torch").resolved("cuda")
    router = next(x for x in perf.kernel_list(cfg, 2, 1, 600, "torch")
                  if x.shape.get("op") == "router")
    c = pricing.Calibrated(no_graph)
    t, basis = c.price(router)
    assert "eager_op" in basis and t == pytest.approx(router.launches * c.launch("eager_op"))
    assert "graph_kernel" in pricing.Calibrated(base).price(router)[1]


def test_a_prefills_grouped_gemms_ask_for_the_entries_a_measured_routing_needs():
    """A prompt's grouped GEMMs need, beside the entry of their tokens, the entry where each
    expert holds the rows of a routing to only ``k`` experts (``needs.moe_bracket``): a
    measured routing is priced at its rows per expert (``equal_rows_tokens``), which lie in
    between; a decode step asks for its own tokens only."""
    from sweep.analysis.needs import moe_bracket, needs
    from sweep.analysis.price_moe import equal_rows_tokens

    cfg = ModelConfig.from_name("qwen3_30b_a3b").resolved("cuda")
    got = needs([(cfg, {"batch": 1, "prompt_len": 512, "new_tokens": 64}, "cudagraph")], "cuda")
    tokens = {(op, m) for op, m, *_ in got["moe_gemm"]}
    assert {("moe_up", 512), ("moe_up", 8192), ("moe_down", 512), ("moe_down", 8192)} <= tokens
    assert moe_bracket(512, 128, 8) == 8192 and moe_bracket(8192, 128, 8) == 65536
    for touched in (8.0, 29.75, 100.0, 128.0):
        assert 512 <= equal_rows_tokens(128, 8, 512, touched) <= 8192 * (1 + 1e-6)
    # a 4-token prompt runs its router in one launch (router_route): no bracket for it
    short = needs([(cfg, {"batch": 1, "prompt_len": 4, "new_tokens": 4}, "cudagraph")], "cuda")
    short = {(op, m) for op, m, *_ in short["moe_gemm"]}
    assert {m for op, m in short if op == "router_route"} == {1, 4}
    assert {m for op, m in short if op == "moe_up"} == {1, 4, 64}
