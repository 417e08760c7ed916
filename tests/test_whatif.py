"""Beyond the GPU at hand (CPU): hardware specs of the targets, a design predicted on each with its
basis, a predict-only study (no model built), and what-if over a measured study."""

import json
import math
from pathlib import Path

import optuna
import pytest

from sweep.analysis.hardware import available, load_spec
from sweep.analysis.targets import config_of, predict_on
from tests.helpers import run_tiny
from zoo import ModelConfig

TARGETS = ["b200", "mi300x", "mi325x", "m3_max", "m4_max", "snapdragon_x_elite_cpu",
           "snapdragon_x_elite_gpu", "snapdragon_x_elite_npu", "snapdragon_8_gen3", "epyc_9654"]


def test_every_target_spec_has_sources_and_assumptions():
    for name in TARGETS + ["h100_sxm", "h100_pcie", "h200", "a100_80gb", "l4"]:
        assert name in available()
        s = load_spec(name)
        assert s.source and s.date, name
        assert math.isfinite(s.hbm_gb_s) and math.isfinite(s.memory_gb), name
        a = s.assumptions
        assert {"compute_efficiency", "bandwidth_efficiency", "launch_us", "basis"} <= set(a), name
        assert 0 < a["compute_efficiency"] <= 1 and 0 < a["bandwidth_efficiency"] <= 1, name
    assert {load_spec(n).vendor for n in TARGETS} >= {"NVIDIA", "AMD", "Apple", "Qualcomm"}
    assert {load_spec(n).kind for n in TARGETS} == {"gpu", "cpu", "npu"}


def test_a_design_on_each_target_says_its_basis():
    cfg = ModelConfig.from_name("llama3_2_1b")
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 128}
    rows = {t: predict_on(cfg, wl, load_spec(t)) for t in TARGETS}
    for t, r in rows.items():
        # a spec fitted on public measurements says so; the others are roofline x assumptions
        kind = "fitted" if load_spec(t).fitted else "roofline"
        assert r["basis_kind"] == kind and t in r["prediction_basis"], t
        assert r["decode_tpot_ms"] > 0 and r["decode_tok_s"] > 0 and r["fits_memory"], t
        assert r["decode_bound"] in ("memory-bound", "compute-bound", "overhead-bound"), t
    # decode at batch 1 is bandwidth-bound: a faster memory is a faster decode
    assert rows["mi325x"]["decode_tpot_ms"] < rows["mi300x"]["decode_tpot_ms"]
    assert rows["m4_max"]["decode_tok_s"] > rows["m3_max"]["decode_tok_s"]
    assert math.isnan(rows["m4_max"]["decode_j_per_token"])  # no TDP stated
    assert "no TDP" in rows["m4_max"]["decode_j_per_token_reason"]
    assert rows["mi300x"]["decode_j_per_token_basis"].startswith("upper bound")  # not measured
    big = ModelConfig.from_name("llama3_1_8b")
    assert not predict_on(big, dict(wl, batch=64, prompt_len=8192), load_spec(
        "snapdragon_8_gen3"))["fits_memory"]


def test_a_stage_the_public_fit_does_not_cover_says_so():
    """A spec fitted on public decode measurements only (Snapdragon X Elite's NPU): its prefill
    is the roofline x stated efficiencies with no interval, and the row's notes say so, where a
    stage that has its fit carries its interval and no such note."""
    spec = load_spec("snapdragon_x_elite_npu")
    assert spec.fitted.get("decode") and not spec.fitted.get("prefill")
    r = predict_on(ModelConfig.from_name("llama3_2_1b"),
                   {"batch": 8, "prompt_len": 4096, "new_tokens": 64}, spec)
    assert r["basis_kind"] == "fitted" and r["prefill_pred_ms"] == r["prefill_pred_ms_roofline"]
    assert "prefill: no public prefill measurements fitted" in r["prediction_notes"]
    assert "decode:" not in r["prediction_notes"]
    assert "prefill: the roofline x stated efficiencies" in r["prediction_basis"]  # not notes only
    assert r["prefill_pred_basis"].startswith("roofline x")
    assert r["decode_pred_basis"] == "fitted on public decode measurements"
    assert r["decode_pred_ms_lo"] < r["decode_pred_ms"] < r["decode_pred_ms_hi"]
    assert math.isnan(r.get("prefill_pred_ms_lo", math.nan))


def test_config_of_a_row_round_trips():
    from sweep.objective import design_columns

    cfg = ModelConfig.from_name("qwen2_5_7b")  # qkv bias, its own rope_theta
    assert config_of(design_columns(cfg)).to_dict() == cfg.to_dict()


@pytest.mark.slow
def test_predict_only_study_builds_no_model(tmp_path):
    _, _, df = run_tiny(tmp_path, "+experiment=gqa_vs_mha", "study.predict=true",
                        "hardware=mi300x")
    done = df[df.state == "COMPLETE"]
    assert len(done) >= 3 and done.predicted.all()
    assert done.prediction_basis.str.contains("mi300x").all()
    assert done.decode_tok_s.gt(0).all() and "trial_dir" not in done.columns
    assert done.switch_rope_in_attention.eq(True).all()  # the switches it was priced under
    assert not list(tmp_path.glob("**/trials/*"))  # no trial child ran
    # its report says the figures are predictions (it showed "Predicted and measured", errors
    # vs a measurement, and the predicted TTFT in the measured column)
    page = next(tmp_path.glob("**/report.html")).read_text()
    assert "Predicted (nothing measured)" in page and "Predicted and measured" not in page
    assert "measured on this device" not in page


def test_predictions_follow_the_switches_on_every_basis():
    """``predict_on`` prices a design under the switches it would run under, on each basis: with
    ``rope_in_attention=false`` a Triton decode step keeps its RoPE + cache-write launch per
    layer, so the step is slower (calibrated on the H100, transferred to the H200, and roofline
    x stated launch cost on an A100 with no calibration); prefill does not change."""
    from kernels.switches import Switches
    from sweep.analysis import calibration_store as store
    from sweep.analysis.pricing import Calibrated

    h100 = Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    cfg = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    assert cfg.kernels == "triton"
    wl = dict(batch=1, prompt_len=512, new_tokens=64)
    for hw, c in (("h100_sxm", h100), ("h200", h100), ("a100_80gb", None)):
        spec = load_spec(hw)
        on = predict_on(cfg, wl, spec, c)
        off = predict_on(cfg, wl, spec, c, switches=Switches(rope_in_attention=False))
        assert off["decode_tpot_ms"] > on["decode_tpot_ms"] * 1.005, hw
        assert off["ttft_ms"] == pytest.approx(on["ttft_ms"], rel=1e-9), hw
    # a study's rows say which switches they ran under; the what-if tables price them so
    import numpy as np

    from sweep.analysis.targets import switches_of

    assert switches_of({"switch_rope_in_attention": np.False_, "d_model": 8}) == Switches(
        rope_in_attention=False)
    assert switches_of({"switch_pdl": "False", "switch_autotune": math.nan}) == Switches(pdl=False)
    with pytest.raises(ValueError, match="pdl"):
        switches_of({"switch_pdl": "maybe"})


@pytest.mark.slow
def test_whatif_over_a_measured_study(tmp_path, measured_study):
    from sweep.report.other_hardware import main

    plan, _, _ = measured_study
    out = tmp_path / "wf"
    assert main([str(plan.results), "--hardware", "h100_sxm", "mi300x", "m4_max",
                 "snapdragon_8_gen3", "--out", str(out)]) == 0
    for f in ("whatif.csv", "ranks.csv", "fronts.json", "fronts.png"):
        assert (out / f).exists(), f
    import pandas as pd

    w = pd.read_csv(out / "whatif.csv")
    assert set(w.target) == {"h100_sxm", "mi300x", "m4_max", "snapdragon_8_gen3"}
    assert w.prediction_basis.notna().all()
    assert set(json.loads((out / "fronts.json").read_text())["bases"]) == set(w.target)
    # a CPU study measured the tiny model: its real designs (predicted_h100_sxm.csv) are priced,
    # every target with a figure (the tiny fp32 model had no fp32 GEMM entry on the GPUs)
    assert list(plan.results.glob("predicted_*.csv"))
    assert list(dict.fromkeys(w.design)) == [f"n_kv_heads={h}" for h in (1, 2, 4, 8, 16, 32)]
    assert (w.basis_kind != "not predicted").all()
    same = pd.read_csv(next(plan.results.glob("predicted_h100_sxm.csv")))  # the same prices
    h100 = w[w.target == "h100_sxm"].decode_tpot_ms.to_numpy()
    assert h100 == pytest.approx(same.decode_tpot_ms.to_numpy(), rel=1e-9)
    assert main([str(plan.results), "--hardware", "no_such_chip"]) == 2
    # without --out: beside the study, in its results_dir (it went to ./results/whatif/)
    assert main([str(plan.results), "--hardware", "m4_max"]) == 0
    assert (plan.results.parent / "whatif" / plan.results.name / "whatif.csv").exists()
    # the rank changes keep their header when no pair changes order (a 1-byte file before)
    from sweep.report.other_hardware import rank_changes

    none = rank_changes(w[w.target == "h100_sxm"], ["h100_sxm"], "decode_tok_s")
    assert none.empty and "survives" in none.columns and "design_a" in none.to_csv()


def test_advisor_findings_and_alternatives():
    from sweep.analysis.advice import AdviseConf, advise, alternatives, findings
    from sweep.analysis.hardware import load_spec
    from zoo import counts

    base = ModelConfig.from_name("llama3_2_1b")
    cfg = base.replace(ffn_dim=8100)
    wl = {"batch": 4, "prompt_len": 2048, "new_tokens": 16}
    found = findings(cfg, wl, 132)
    assert [f["field"] for f in found if f["rule"] == "not a multiple of 64"] == ["ffn_dim"]
    assert "16 bytes" in found[0]["detail"]
    assert not [f for f in findings(base, wl, 132) if f["rule"] == "not a multiple of 64"]
    # head_dim 96: aligned heads of the same attention widths (so the same KV bytes per token)
    odd = base.replace(head_dim=96, n_heads=20, n_kv_heads=4)
    labels = dict(alternatives(odd, {"head_dim"}))
    assert labels["head_dim=64, n_heads=30, n_kv_heads=6"] == {
        "head_dim": 64, "n_heads": 30, "n_kv_heads": 6}
    r = advise(cfg, wl, load_spec("h100_sxm"), None)
    kv = counts.kv_bytes_per_token(cfg)
    p0 = counts.params(cfg).non_embedding
    assert r["alternatives"] and r["basis"].startswith("roofline")
    for a in r["alternatives"]:
        c = cfg.replace(**a["overrides"])
        assert counts.kv_bytes_per_token(c) == kv
        assert abs(counts.params(c).non_embedding / p0 - 1) <= 0.03
        assert a["gain_pct"] == max(a["prefill_gain_pct"], a["decode_gain_pct"]) > 0
    narrow = advise(cfg, wl, load_spec("h100_sxm"), None, AdviseConf(band=0.01))
    assert {x["label"]: x["reason"] for x in narrow["rejected"]}["ffn_dim=7936"].startswith(
        "non-embedding params -1.7% outside +-1%")


def test_advise_cli_prices_from_the_h100_calibration(tmp_path):
    from sweep.cli.advise import main

    cal = Path(__file__).resolve().parent.parent / "results/reference/calibration_h100.json"
    assert main(["model=llama3_2_1b", "model.ffn_dim=8100", "hardware=h100_sxm",
                 f"--calibration={cal}", f"--out={tmp_path}"]) == 0
    r = json.loads((tmp_path / "advise.json").read_text())
    assert r["basis"] == "calibrated: NVIDIA H100 80GB HBM3"
    assert [2048, 8100] in r["missing_shapes"]  # K=8100 never calibrated: said, not hidden
    assert "ffn_dim" in (tmp_path / "advise.md").read_text()
    assert main(["model=llama3_2_1b", "model.ffn_dim=0", "--out", str(tmp_path)]) == 2
    # a file that cannot price the target (an H100's for an MI300X) had been dropped silently
    # for the roofline: refused, named
    assert main(["model=llama3_2_1b", "hardware=mi300x", f"--calibration={cal}",
                 f"--out={tmp_path / 'mi'}"]) == 2
    assert not (tmp_path / "mi").exists()


def test_advise_writes_under_results_dir_and_names_the_model_and_its_fit(tmp_path):
    # results_dir= was accepted and the advice written under the source tree's results/; the
    # advice named no model, and gave a design that cannot fit the target no word of it
    from sweep.cli.advise import main

    assert main(["model=mixtral_8x7b", "hardware=h100_sxm", f"results_dir={tmp_path}"]) == 0
    (md,) = (tmp_path / "advise").glob("*/advise.md")
    text = md.read_text()
    assert "mixtral_8x7b" in text.splitlines()[0] and "does not fit: needs" in text
    assert json.loads(md.with_name("advise.json").read_text())["fits_memory"] is False


def test_advisor_reads_a_mixture_of_experts_and_names_it_apart(tmp_path):
    """An MoE design's ``expert_ffn_dim`` is alignment-checked and mended (its ``ffn_dim``, unused
    when every layer is MoE, is not), the advice names the expert fields, and two designs, targets
    or workloads that differ write to two folders (they overwrote one)."""
    from sweep.analysis.advice import advise, alternatives, findings
    from sweep.cli.advise import out_label

    cfg = ModelConfig.from_name("olmoe_1b_7b").replace(expert_ffn_dim=1000, ffn_dim=1000)
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 16}
    odd = {f["field"] for f in findings(cfg, wl, 132) if f["rule"] == "not a multiple of 64"}
    assert odd == {"expert_ffn_dim"}
    # a grouped GEMM's tiles are its experts' together (64 x 16 = 1024 at 64 rows each: 0.97
    # of 8 waves), not one expert's 16 (a wave of 0.12 it reported)
    waves = [f for f in findings(ModelConfig.from_name("olmoe_1b_7b"), wl, 132)
             if f["rule"] == "wave quantization"]
    assert not [f for f in waves if f["field"].endswith(("moe_up", "moe_down"))], waves
    r = advise(cfg, wl, load_spec("h100_sxm"), None)
    assert r["design"]["n_experts"] == 64 and r["design"]["expert_ffn_dim"] == 1000
    assert dict(alternatives(cfg, {"expert_ffn_dim"}))["expert_ffn_dim=1024"] == {
        "expert_ffn_dim": 1024}
    # roofline prices see no alignment: the wider 1024 is not predicted faster; 960 is outside
    # the +-3% parameter band, and said so
    assert not r["alternatives"] and r["basis"].startswith("roofline")
    assert {x["label"]: x["reason"] for x in r["rejected"]}["expert_ffn_dim=960"].startswith(
        "non-embedding params -3.8%")
    # priced from the H200's calibration, which has no entries for 1000-wide experts: the
    # design's price rests on stand-ins, and the advice says so
    from sweep.analysis import calibration_store as store
    from sweep.analysis import pricing

    h200 = advise(cfg.resolved("cuda"), wl | {"batch": 8}, load_spec("h200"),
                  pricing.Calibrated(store.shipped("NVIDIA H200")))
    assert "the design's own price rests on stand-ins" in h200["basis"]
    assert all(a["stand_ins"] for a in h200["alternatives"])
    h100 = load_spec("h100_sxm")
    base = ModelConfig.from_name("olmoe_1b_7b")
    names = [out_label(advise(c, w, s, None)) for c, w, s in (
        (base, wl, h100), (base.replace(n_experts=32), wl, h100),
        (base.replace(n_experts_active=4), wl, h100), (base, wl | {"batch": 4}, h100),
        (base, wl, load_spec("h200")))]
    assert len(set(names)) == 5 and all(len(n) <= 160 for n in names), names


def test_a_predicted_design_that_does_not_fit_is_pruned_with_its_figures_kept():
    """Mixtral-8x7B in bf16 (93.5 GB, 87.1 GiB, with its KV cache) on an 80 GB (GiB) H100:
    PRUNED, the reason naming both sizes, its predicted figures kept; on a 141 GB H200 it is
    COMPLETE."""
    from sweep.analysis.targets import predict_designs

    cfg = ModelConfig.from_name("mixtral_8x7b")
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 128}
    (h100,) = predict_designs([(cfg, wl, "cudagraph")], load_spec("h100_sxm"))
    assert h100["state"] == "PRUNED" and h100["decode_tok_s"] > 0
    assert h100["fail_reason"].startswith("does not fit: needs 87.1 GiB")
    assert "80 GiB" in h100["fail_reason"]
    (h200,) = predict_designs([(cfg, wl, "cudagraph")], load_spec("h200"))
    assert h200["state"] == "COMPLETE" and "fail_reason" not in h200


def test_every_predicted_row_says_its_confidence():
    """A predict-only row carries ``prediction_confidence`` as a measured row's prediction does:
    from its intervals (calibrated on the device, transferred, or fitted on public
    measurements); one priced by stated efficiencies alone, with no interval: ``low``."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import pricing

    cfg = ModelConfig.from_name("llama3_2_1b")
    cal = pricing.Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 64}
    for spec in ("h100_sxm", "a100_80gb", "m4_max"):
        row = predict_on(cfg, wl, load_spec(spec), cal)
        assert row["prediction_confidence"] in ("high", "medium", "low"), spec
    bare = predict_on(cfg, wl, load_spec("h100_sxm"), None)  # no calibration, no fit: stated
    assert bare["basis_kind"] == "roofline" and bare["prediction_confidence"] == "low"


def test_a_row_priced_by_stand_ins_says_so_and_widens_its_interval():
    """An MoE design on a calibration without its ``moe_gemm`` entries is priced by stand-ins
    (the grouped GEMMs as one GEMM over the experts' rows stacked): its basis says so, its
    interval is wider than the same design's on its own entries, and its confidence is low
    (it was "calibrated", medium, and on the H200 priced E64 k8's decode 30% fast)."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import pricing
    from sweep.analysis.predict import STAND_INS
    from sweep.common.row import pred

    cfg = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    wl = {"batch": 8, "prompt_len": 1024, "new_tokens": 64}
    have = store.shipped("NVIDIA H200")
    own = predict_on(cfg, wl, load_spec("h200"), pricing.Calibrated(have))
    bare = have.with_(table=have.table[have.table.kind != "moe_gemm"])
    sub = predict_on(cfg, wl, load_spec("h200"), pricing.Calibrated(bare))
    assert STAND_INS not in own["prediction_basis"] and own["prediction_confidence"] != "low"
    assert sub["prediction_basis"].endswith(STAND_INS) and sub["basis_kind"] == "calibrated"
    assert sub["prediction_confidence"] == "low"

    def width(r):
        return (r[pred("decode", "hi")] - r[pred("decode", "lo")]) / r[pred("decode")]

    assert width(sub) > 2 * width(own)
    assert pricing.stand_in("gemv N=4096 K=4096 none (8 experts' rows stacked)")
    assert not pricing.stand_in("moe_gemm moe_up E=64 k=8 N=2048 K=2048")


def test_an_moe_gemm_whose_nearest_entry_is_in_the_other_regime_is_priced_by_the_stand_in():
    """A decode step's grouped GEMM (8 tokens, memory-bound) whose shape has entries only at a
    prefill's 8192 tokens (compute-bound) is not priced from them (the H200's E32 k4 F2048
    decode read 5.83 ms against 2.96 measured, moe_h100.md) but by the stand-in, noted."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import pricing

    cfg = ModelConfig.from_name("olmoe_1b_7b").replace(
        n_experts=32, n_experts_active=4, expert_ffn_dim=2048).resolved("cuda")
    wl = {"batch": 8, "prompt_len": 1024, "new_tokens": 64}
    have = store.shipped("NVIDIA H200")
    t = have.table
    prefill_only = ~((t.kind == "moe_gemm") & (t.E == 32) & (t.k == 4) & (t.M < 1024))
    far = predict_on(cfg, wl, load_spec("h200"), pricing.Calibrated(have.with_(table=t[prefill_only])))
    assert "(8192 tokens) is compute-bound: priced by the stand-in" in far["prediction_notes"]
    assert "rows stacked" in far["decode_pred_basis"]
    # from the prefill entry it read 2.7x its roofline; the stand-in (scaled by the memory-bound
    # entries' ratio) 1.5x, against 1.37x measured (2.96 ms)
    assert far["decode_tpot_ms"] < 2 * far["decode_pred_ms_roofline"]


def test_the_grouped_gemm_stand_in_is_scaled_by_the_calibrations_own_entries():
    """A grouped GEMM without entries of its shape is priced by the stand-in (one GEMM over the
    touched experts' rows stacked) times what the calibration's own entries of that kernel, in
    the same regime, took against it: the H200's compute-bound ones 1.3-1.9x (a prefill priced
    -31% / -40% before, moe_h100.md); the ratio's notes are not the row's."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import pricing
    from sweep.analysis.price_moe import stand_in_ratio
    from sweep.analysis.proxies import proxy_price
    from zoo.launches import Kernel

    cal = pricing.Calibrated(store.shipped("NVIDIA H200"))
    r, n = stand_in_ratio(cal, "moe_up", "bf16", memory_bound=False)
    assert n >= 5 and 1.1 < r < 3, (r, n)
    assert stand_in_ratio(cal, "router_route", "bf16", True) == (1.0, 0)
    assert cal.notes == []
    # a 1000-wide expert's prefill GEMM (no entries of its shape): the stand-in times the ratio
    shape = {"M": 1024, "N": 2000, "K": 2048, "dtype": "bf16", "experts": 64, "tokens": 8192,
             "E": 64, "topk": 8}
    k = Kernel("ffn", "gemm", "moe_up", 2 * 1024 * 64 * 2000 * 2048, 64 * 2000 * 2048 * 2, shape, 1, 1)
    t, basis = cal.price(k)
    assert t == pytest.approx(proxy_price(cal, k)[0] * r)
    assert "rows stacked" in basis and f"x{r:.2f}" in basis and pricing.stand_in(basis)


def test_a_prompt_that_reached_fewer_experts_is_priced_on_the_routing_measured():
    """A random router sends a 512-token prompt to about 30 of Qwen3-30B-A3B's 128 experts a
    layer, measured (``moe_prefill_experts_touched``); priced over all 128 it read +100% on the
    H100 (``heldout_moe_h100.md``). Over the measured experts, each with its rows
    (``equal_rows_tokens``), the prefill costs less, the basis says so, and the uniform
    routing's own count changes nothing."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis import pricing
    from sweep.analysis.predict import row_predictions
    from sweep.analysis.price_moe import equal_rows_tokens
    from zoo.routing import expected_touched

    assert equal_rows_tokens(128, 8, 512, None) == 512
    assert equal_rows_tokens(128, 8, 512, expected_touched(128, 8, 512)) == 512
    m = equal_rows_tokens(128, 8, 512, 30.0)  # 4096 slots over 30 experts: 136.5 rows each
    assert m * 8 / expected_touched(128, 8, m) == pytest.approx(4096 / 30.0, rel=1e-6)
    cfg = ModelConfig.from_name("qwen3_30b_a3b").resolved("cuda")
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 64}
    cal = pricing.Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))

    def priced(**measured):
        return row_predictions(cfg, wl, load_spec("h100_sxm"), cal, "cudagraph", {},
                               {"ttft_ms": 13.6, "decode_tpot_ms": 3.4, **measured})

    plain = priced()
    same = priced(moe_prefill_experts_touched=expected_touched(128, 8, 512))
    few = priced(moe_prefill_experts_touched=29.75, moe_decode_experts_touched=8.0)
    assert same["prefill_pred_ms"] == pytest.approx(plain["prefill_pred_ms"], rel=1e-9)
    assert few["prefill_pred_ms"] < 0.7 * plain["prefill_pred_ms"]
    assert few["decode_pred_ms"] == pytest.approx(plain["decode_pred_ms"], rel=1e-3)
    assert few["prediction_basis"].endswith("MoE layers on the routing the trial measured "
                                            "(moe_prefill_experts_touched, "
                                            "moe_decode_experts_touched)")
    assert "measured" not in plain["prediction_basis"]


def test_expected_blocks_count_each_experts_rows_in_whole_blocks():
    """``zoo.routing.expected_blocks`` against the binomial's exact sum (small) and the
    uniform limits: one block per touched expert while an expert's rows stay under the block,
    the slots over the block where every expert holds many."""
    from math import comb

    from zoo.routing import expected_blocks, expected_touched

    def exact(E, k, n, b):
        q = k / E
        return E * sum(comb(n, x) * q ** x * (1 - q) ** (n - x) * -(-x // b) for x in range(n + 1))

    for E, k, n, b in ((8, 2, 40, 16), (64, 8, 100, 16), (16, 4, 300, 64)):
        assert expected_blocks(E, k, n, b) == pytest.approx(exact(E, k, n, b), rel=1e-9)

    def by_recurrence(E, k, n, b):  # the binomial's mass in log space, term to term
        q, lp, total = k / E, n * math.log1p(-k / E), 0.0
        for x in range(n + 1):
            total += math.exp(lp) * -(-x // b)
            lp += math.log((n - x) / (x + 1)) + math.log(q / (1 - q)) if x < n else 0.0
        return E * total

    # past 400 rows of variance: the normal approximation, within 1e-3 of the exact sum
    for E, k, n, b in ((64, 8, 4096, 64), (16, 4, 2000, 128), (128, 8, 65536, 128)):
        assert expected_blocks(E, k, n, b) == pytest.approx(by_recurrence(E, k, n, b), rel=1e-3)
    assert expected_blocks(64, 8, 8, 16) == pytest.approx(expected_touched(64, 8, 8), rel=1e-3)
    assert expected_blocks(128, 8, 65536, 128) == pytest.approx(65536 * 8 / 128 + 64, rel=0.02)
    assert expected_blocks(64, 8, 4096, 64, skew=1.0) > expected_blocks(64, 8, 4096, 64)


def test_a_measured_moe_row_is_priced_on_its_routing_on_every_target():
    """``study_targets.predict_designs`` prices a measured MoE row on the routing its trial
    measured on a target it prices from a calibration, as the row itself was (the same weights
    route alike on any chip): on the H200's own calibration the prefill of a prompt that reached
    30 of 128 experts costs less than under the expected routing, and the basis says so; a
    target priced by a public fit (MI300X) prices the expected routing and does not say so."""
    import dataclasses

    import pandas as pd

    from sweep.analysis.study_targets import predict_designs

    cfg = ModelConfig.from_name("qwen3_30b_a3b").resolved("cuda")
    row = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    meta = {"workload": {"batch": 1, "prompt_len": 512, "new_tokens": 64},
            "objectives": ["decode_tok_s"], "directions": ["maximize"], "mode": "cudagraph"}
    rows = pd.DataFrame([dict(row, state="COMPLETE", number=0),
                         dict(row, state="COMPLETE", number=1, moe_prefill_experts_touched=29.75,
                              moe_decode_experts_touched=8.0)])
    got = predict_designs(meta, rows, ["h200", "mi300x"], None)
    plain, measured, fit_plain, fit = (got[(got.target == t) & (got.design == f"trial {n}")]
                                       .iloc[0] for t in ("h200", "mi300x") for n in (0, 1))
    assert measured.prefill_pred_ms < 0.8 * plain.prefill_pred_ms
    assert "routing the trial measured" in measured.prediction_basis
    assert "routing the trial measured" not in plain.prediction_basis
    assert fit.prefill_pred_ms == fit_plain.prefill_pred_ms
    assert "routing the trial measured" not in fit.prediction_basis


def test_a_predicted_study_extended_runs_new_designs(tmp_path):
    """A predict-only study with a seeded sampler, run again with more trials: the new trials
    are new designs, not the sampler's first proposals replayed (a newcomer's 5 -> 12 ended
    with 7 designs, every new trial a ``duplicate_of``)."""
    over = ("+experiment=design_space", "study.predict=true", "hardware=h200")
    run_tiny(tmp_path, *over, "study.n_trials=5")
    _, study, df = run_tiny(tmp_path, *over, "study.n_trials=12")
    designs = df[df.duplicate_of.isna()] if "duplicate_of" in df else df
    assert len(designs) == 12
    params = [c for c in df.columns if c.startswith("param_")]
    assert not designs.duplicated(params).any()


def test_a_seeded_sampler_extended_past_200_designs_still_finds_new_ones(tmp_path):
    """``run_predicted`` on a study already holding 250 designs: a seeded sampler replays its
    250 first proposals (each a ``duplicate_of``) before new ones come; the replay is not taken
    for an exhausted space (200 duplicates in a row had ended the run with 0 new designs)."""
    from optuna.samplers import RandomSampler
    from optuna.trial import TrialState

    from sweep.runs import run_predicted

    url = f"sqlite:///{tmp_path}/s.db"

    def objective(trial):  # Objective's rule: a design already held is not priced again
        x = trial.suggest_int("x", 0, 10**6)
        for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.params.get("x") == x and t.user_attrs.get("duplicate_of") is None:
                trial.set_user_attr("duplicate_of", t.number)
                return t.value
        return float(x)

    study = optuna.create_study(storage=url, study_name="s", sampler=RandomSampler(seed=0))
    assert run_predicted(study, objective, None, target=250) == 250
    again = optuna.load_study(study_name="s", storage=url, sampler=RandomSampler(seed=0))
    assert run_predicted(again, objective, None, target=260) == 10
    new = [t for t in again.trials if t.user_attrs.get("duplicate_of") is None]
    assert len(new) == 260 and len({t.params["x"] for t in new}) == 260


def test_the_advisor_prices_a_target_without_calibration_as_the_what_if_does():
    """``advise`` on an M4 Max (no calibration) takes the what-if's price of the design
    (``targets.predict_on``: its fit of public measurements) and says so; it had priced the bare
    roofline (TPOT 4.53 ms against the what-if's 7.79 for the same design)."""
    from sweep.analysis.advice import advise
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.targets import predict_on

    cfg = ModelConfig.from_name("llama3_2_1b").replace(ffn_dim=8100).resolved("cuda")
    wl = dict(batch=1, prompt_len=512, new_tokens=64)
    spec = load_spec("m4_max")
    r = advise(cfg, wl, spec, None)
    want = predict_on(cfg, wl, spec, None)
    assert r["predicted"]["decode_pred_ms"] == pytest.approx(want["decode_tpot_ms"])
    assert r["predicted"]["prefill_pred_ms"] == pytest.approx(want["ttft_ms"])
    assert r["basis"].startswith("fitted on public measurements, m4_max")


def test_a_predicted_design_fits_the_memory_a_measured_one_may_hold():
    """A predict-only study held a design to all of its target's memory (15.6 GB needed counted
    as fitting a 16 GB phone); a measured one is held to 90% less 1 GiB: the same bound now."""
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.targets import misfit, usable_bytes

    spec = load_spec("snapdragon_8_gen3")
    assert usable_bytes(spec) == pytest.approx(0.9 * spec.memory_gb * 2**30 - 2**30)
    why = misfit({"fits_memory": False, "memory_needed_bytes": 15.59e9}, spec)
    assert "usable" in why and f"{usable_bytes(spec) / 2**30:.1f} GiB usable" in why


def test_a_spec_memory_size_is_read_as_the_binary_gigabytes_it_is_stated_in():
    # an "80 GB" H100 holds 80 GiB (NVML: 81559 MiB to programs); read as 80e9 bytes, a
    # predict-only study pruned designs a measured study on the card runs (Llama-3.1-8B, batch
    # 28 x 8192: 69.7 GiB needed, 71.0 usable)
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.memory import usable
    from sweep.analysis.targets import fits_memory, usable_bytes
    from zoo import ModelConfig, counts

    spec = load_spec("h100_sxm")
    nvml_total = 81559 * 2**20  # torch.cuda.mem_get_info()[1] on an H100 80GB HBM3
    assert abs(usable_bytes(spec) - usable(nvml_total)) < 0.01 * usable(nvml_total)
    need = counts.memory_need(ModelConfig.from_name("llama3_1_8b").resolved("cuda"), 28, 8192,
                              64)["total"]
    assert need <= usable(nvml_total) and fits_memory(need, spec) is True


def test_a_fitted_interval_never_reads_under_the_datasheet_roofline():
    """On the MI300X (a fitted spec) an MoE prefill's low end read 13.1 ms where its FLOPs at
    the datasheet's peak take 14.3 ms: faster than the chip can be."""
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.targets import predict_on
    from zoo import ModelConfig, counts

    spec = load_spec("mi300x")
    assert spec.fitted.get("prefill")
    cfg = ModelConfig.from_name("olmoe_1b_7b").resolved("cuda")
    wl = {"batch": 8, "prompt_len": 1024, "new_tokens": 64}
    row = predict_on(cfg, wl, spec)
    st = counts.prefill(cfg, 8, 1024)
    floor_ms = st.matmul_flops / spec.peak_flops("bf16") * 1e3
    assert row["prefill_pred_ms_lo"] >= floor_ms * (1 - 1e-9)


def test_predict_on_holds_a_design_to_the_usable_memory():
    # the same bound in predict_on's fits_memory (the row's PRUNED), not only in its message
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.targets import predict_on, usable_bytes
    from zoo import ModelConfig, counts

    spec = load_spec("h200")
    cfg = ModelConfig.from_name("llama3_1_8b").resolved("cuda")
    for B in range(1, 400):  # the first batch past the usable bytes
        if counts.memory_need(cfg, B, 8192, 64)["total"] > usable_bytes(spec):
            break
    wl = {"batch": B, "prompt_len": 8192, "new_tokens": 64}
    assert counts.memory_need(cfg, B, 8192, 64)["total"] <= spec.memory_gb * 2**30
    assert predict_on(cfg, wl, spec)["fits_memory"] is False


def test_a_fitted_interval_holds_its_point():
    # a fitted point under the datasheet roofline was left there, its clamped low end above it
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.targets import predict_on
    from zoo import ModelConfig

    row = predict_on(ModelConfig.from_name("qwen2_5_7b").resolved("cuda"),
                     {"batch": 64, "prompt_len": 4096, "new_tokens": 64},
                     load_spec("snapdragon_x_elite_cpu"))
    assert row["decode_pred_ms_lo"] <= row["decode_pred_ms"] <= row["decode_pred_ms_hi"]


def test_a_spec_without_a_memory_size_prunes_nothing():
    # ~hardware.memory_gb (NaN: not stated): the fit is unknown, said so; the design is priced and
    # kept (it had been PRUNED as "does not fit ... nan GB")
    import dataclasses

    from sweep.analysis.targets import misfit

    spec = dataclasses.replace(load_spec("m4_max"), memory_gb=math.nan)
    cfg = ModelConfig.from_name("llama3_2_1b").resolved("cpu")
    p = predict_on(cfg, {"batch": 8, "prompt_len": 4096, "new_tokens": 64}, spec)
    assert math.isnan(p["fits_memory"]) and "memory_gb" in p["fits_memory_reason"]
    assert misfit(p, spec) is None and p["decode_tpot_ms"] > 0
    known = predict_on(cfg, {"batch": 8, "prompt_len": 4096, "new_tokens": 64}, load_spec("m4_max"))
    assert known["fits_memory"] is True and "fits_memory_reason" not in known


def test_an_fp16_design_is_priced_by_the_bf16_entries_and_says_so():
    # most AWQ / GPTQ config.json files say float16: the shipped grids measure bf16 only, and
    # the design had gone unpriced ("no fp16 GEMM in the calibration")
    from sweep.analysis import calibration_store as store
    from sweep.analysis.pricing import Calibrated

    spec = load_spec("h100_sxm")
    cal = Calibrated(store.shipped("NVIDIA H100 80GB HBM3"))
    wl = {"batch": 8, "prompt_len": 512, "new_tokens": 64}
    bf = predict_on(ModelConfig.from_name("llama3_2_1b").resolved("cuda"), wl, spec, cal)
    fp = predict_on(ModelConfig.from_name("llama3_2_1b", dtype="fp16", kv_dtype="fp16")
                    .resolved("cuda"), wl, spec, cal)
    assert fp["decode_tpot_ms"] == pytest.approx(bf["decode_tpot_ms"], rel=1e-9)
    assert "fp16 kernels priced by the calibration's bf16 entries" in fp["prediction_notes"]
    assert "stand-ins" in fp["prediction_basis"] and "stand-ins" not in bf["prediction_basis"]


def test_a_predicted_rows_energy_bound_and_class_say_what_they_rest_on():
    # the TDP "upper bound" of J/token was priced at the point TPOT (under the interval's top);
    # a decode that is not priced (mode=compile, kernels=torch) still read "memory-bound"
    from sweep.analysis import calibration_store as store
    from sweep.analysis.pricing import Calibrated
    from sweep.analysis.targets import predict_designs

    spec = load_spec("h100_sxm")
    cal = Calibrated(store.shipped_for(spec))
    wl = {"batch": 4, "prompt_len": 512, "new_tokens": 64}
    cfg = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    (row,) = predict_designs([(cfg, wl, "cudagraph")], spec, cal)
    assert row["decode_pred_ms_hi"] > row["decode_tpot_ms"]
    assert row["decode_j_per_token"] == pytest.approx(
        spec.tdp_w * row["decode_pred_ms_hi"] * 1e-3 / 4)
    torch_cfg = ModelConfig.from_name("llama3_2_1b", kernels="torch").resolved("cuda")
    (row,) = predict_designs([(torch_cfg, wl, "compile")], spec, cal)
    assert math.isnan(row["decode_tpot_ms"]) and row["decode_bound"] == ""
    assert "not modelled" in row["decode_bound_reason"]
    assert "not modelled" in row["decode_j_per_token_reason"]


def test_a_fitted_targets_rows_do_not_say_they_rest_on_the_roofline(tmp_path):
    # a predict-only study on the MI300X (no calibration shipped: fitted on public measurements)
    # wrote "... nor shipped for this target: roofline x stated efficiencies" on fitted rows
    _, _, df = run_tiny(tmp_path, "study.predict=true", "hardware=mi300x", "study.n_trials=1")
    row = df.iloc[0]
    assert row["basis_kind"] == "fitted"
    assert "roofline" not in str(row.get("prediction_reason", "") or "")


def test_whatif_refuses_a_name_twice_and_never_writes_over_another_studys_outputs(tmp_path,
                                                                                   capsys):
    # --hardware h200 h200 ranked every design twice (1st, 3rd, 5th ...); two studies of one
    # folder name wrote one --out folder, the second over the first
    from sweep.report.other_hardware import main

    a, b = (run_tiny(tmp_path / d, "study.predict=true", "hardware=h100_sxm",
                     "study.n_trials=2")[0].results for d in ("a", "b"))
    assert main([str(a), "--hardware", "h200", "h200", "--out", str(tmp_path / "x")]) == 2
    assert main([str(a), str(a), "--hardware", "h200", "--out", str(tmp_path / "x")]) == 2
    assert "named twice" in capsys.readouterr().err and not (tmp_path / "x").exists()
    out = tmp_path / "w"
    assert main([str(a), str(b), "--hardware", "h200", "--out", str(out)]) == 0
    assert len(list(out.glob("*/whatif.csv"))) == 2
    assert main([str(a), "--hardware", "h200", "--out", str(out / "solo")]) == 0
    assert main([str(b), "--hardware", "h200", "--out", str(out / "solo")]) == 2  # a's outputs
    assert "another comparison's outputs" in capsys.readouterr().err


def test_fit_public_with_out_is_refused(tmp_path, capsys):
    # --fit-public --out X ignored --out and rewrote the package's conf/hardware/*.yaml
    from sweep.report.public_check import main

    before = {p: p.read_text() for p in (Path(__file__).parent.parent / "conf" / "hardware")
              .glob("*.yaml")}
    with pytest.raises(SystemExit) as e:
        main(["--fit-public", "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and "--fit-public writes conf/hardware" in capsys.readouterr().err
    assert all(p.read_text() == t for p, t in before.items())


def test_a_predicted_rows_memory_says_it_is_the_predicted_need(tmp_path):
    # peak_mem_bytes (declared "peak GPU memory", measured) held the analytic need with no basis
    _, _, df = run_tiny(tmp_path, "study.predict=true", "hardware=h100_sxm", "study.n_trials=1")
    row = df.iloc[0]
    assert row["peak_mem_bytes"] == row["memory_needed_bytes"]
    assert row["peak_mem_bytes_basis"].startswith("predicted:")


def test_whatif_keeps_two_cpu_fallback_studies_apart_and_owns_its_outputs_from_anywhere(
        tmp_path, measured_study, monkeypatch):
    # two CPU-fallback studies with --out went to one folder named after the real model's CSV
    # (the loop's folder name overwritten); the same study from another folder was refused
    import shutil

    from sweep.report.other_hardware import main

    plan, _, _ = measured_study
    copy = tmp_path / "copy" / plan.results.name
    shutil.copytree(plan.results, copy)
    out = tmp_path / "w"
    assert main([str(plan.results), str(copy), "--hardware", "h200", "--out", str(out)]) == 0
    assert len(list(out.glob("*/whatif.csv"))) == 2
    monkeypatch.chdir(copy.parent)
    assert main([copy.name, "--hardware", "h200", "--out", str(tmp_path / "solo")]) == 0
    monkeypatch.chdir(tmp_path)
    assert main([f"copy/{copy.name}", "--hardware", "h200", "--out", str(tmp_path / "solo")]) == 0


def test_a_target_price_says_what_rests_on_more_than_its_datasheet():
    # an fp8 cache on an A100 (no fp8 there) was priced as on an H100 and ranked first with
    # nothing said; Apple's and Snapdragon's estimated peaks and bf16 at an NPU's fp16 rate too
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 64}
    fp8 = ModelConfig.from_name("llama3_2_1b", kv_dtype="fp8_e4m3", kernels="triton")
    notes = predict_on(fp8, wl, load_spec("a100_80gb"))["prediction_notes"]
    assert "kv_dtype=fp8_e4m3 on a100_80gb, which states no fp8" in notes
    assert "fp8" not in predict_on(fp8, wl, load_spec("h100_sxm"))["prediction_notes"]
    m3 = predict_on(ModelConfig.from_name("llama3_2_1b"), wl, load_spec("m3_max"))
    assert "m3_max's peak_tflops are estimates, not vendor figures" in m3["prediction_notes"]
    npu = load_spec("snapdragon_x_elite_npu")
    assert not math.isfinite(npu.peak_flops("bf16"))
    got = predict_on(ModelConfig.from_name("llama3_2_1b"), wl, npu)["prediction_notes"]
    assert "states no bf16 peak: bf16 priced at its fp16 peak" in got


def test_a_cpu_calibration_never_prices_a_gpu_target():
    # whatif over a study measured on the CPU priced every NVIDIA target without a shipped
    # calibration from the CPU's ("not predicted: no elementwise rmsnorm/triton"): its ceilings
    # hold a bf16 GEMM, which was taken for a GPU's
    import dataclasses

    from sweep.analysis import calibration_store as store
    from sweep.analysis.pricing import Calibrated
    from sweep.analysis.study_targets import for_target
    from sweep.analysis.targets import calibration_for, from_gpu

    h100 = store.shipped("NVIDIA H100 80GB HBM3")
    assert h100 is not None and from_gpu(h100.meta)
    cpu = Calibrated(dataclasses.replace(h100, meta={**h100.meta, "device": "cpu"}))
    a100 = load_spec("a100_80gb")
    assert for_target(a100, cpu) is None
    assert calibration_for(a100, cpu, "bf16") == (None, None)
    assert calibration_for(a100, Calibrated(h100), "bf16")[1] == "transferred"
    row = predict_on(ModelConfig.from_name("llama3_2_1b"),
                     {"batch": 1, "prompt_len": 512, "new_tokens": 64}, a100, cpu)
    assert row["basis_kind"] == "roofline"


def test_a_stage_priced_without_an_interval_makes_the_row_low_confidence():
    # a public fit of decode alone: the prefill is the bare roofline, and the row said "medium"
    spec = load_spec("snapdragon_x_elite_cpu")
    assert spec.fitted.get("decode") and not spec.fitted.get("prefill")
    row = predict_on(ModelConfig.from_name("llama3_2_1b"),
                     {"batch": 1, "prompt_len": 512, "new_tokens": 64}, spec)
    assert math.isfinite(row["decode_pred_ms_hi"]) and row["prediction_confidence"] == "low"
