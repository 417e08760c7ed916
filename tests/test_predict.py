"""The performance model on the CPU: calibration micro-benchmarks, the predictor's two kinds per
module, the transfer to another device, and the predicted columns on every results row."""

import math

import pytest

from sweep.analysis import calibrate as cal
from sweep.analysis import predict as perf
from sweep.analysis.hardware import load_spec
from sweep.env import detect_device
from sweep.space import shipped_designs
from tests.helpers import run_tiny
from zoo import ModelConfig

TINY = ModelConfig.from_name("tiny")
WL = {"batch": 2, "prompt_len": 64, "new_tokens": 16}


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    """A quick CPU calibration over the tiny shipped designs, in a folder of its own."""
    mp = pytest.MonkeyPatch()
    mp.setattr(cal, "CAL_DIR", tmp_path_factory.mktemp("cal"))
    meta, table = cal.calibrate(detect_device("cpu"), shipped_designs(cpu=True), refresh=True,
                                quick=True, ceilings={"copy_bytes_s": 2e10,
                                                      "gemm_flops_fp32": 1e11})
    mp.undo()
    return meta, table


def test_calibration_covers_the_kernels_the_zoo_launches(calibration):
    meta, table = calibration
    assert {"gemm", "decode_attn", "prefill_attn", "elementwise", "launch"} <= set(table.kind)
    for k in ("device", "driver", "torch", "triton", "date", "version", "ceilings"):
        assert k in meta, k
    g = table[table.kind == "gemm"]
    assert (g.time_s > 0).all() and (g.time_s_min <= g.time_s).all()
    n_in = 2 * TINY.ffn_dim
    assert ((g.N == n_in) & (g.K == TINY.d_model)).any()  # the FFN gate+up GEMM of tiny
    assert sorted(g.M.unique())[:3] == [1, 2, 4]
    assert {"rmsnorm", "rope", "swiglu", "kv_write"} <= set(table[table.kind == "elementwise"].op)


def test_prediction_per_module_in_two_kinds(calibration):
    c = perf.Calibrated(calibration[1], calibration[0])
    row = perf.predict(TINY, WL, load_spec("cpu"), c, mode="eager",
                       ceilings=calibration[0]["ceilings"])
    for st in ("prefill", "decode"):
        mods = sum(row[f"{st}_pred_ms_{m}"] for m in perf.MODULES)
        assert row[f"{st}_pred_ms_calibrated"] == pytest.approx(mods)
        assert row[f"{st}_pred_ms_roofline"] > 0 and row[f"{st}_pred_ms_calibrated"] > 0
        assert f"{st}_pred_basis" in row and "gemm N=" in row[f"{st}_pred_basis"]
    assert row["prediction_basis"].startswith("calibrated on cpu")
    assert row["prediction_notes"] == ""  # tiny is inside the calibrated range


def test_outside_the_calibrated_range_says_so(calibration):
    c = perf.Calibrated(calibration[1], calibration[0])
    big = TINY.replace(d_model=1000, n_heads=10, n_kv_heads=5, head_dim=100, ffn_dim=2730)
    row = perf.predict(big, dict(WL, batch=16, prompt_len=200), load_spec("cpu"), c,
                       mode="eager", ceilings=calibration[0]["ceilings"])
    notes = row["prediction_notes"]
    assert "not calibrated: scaled from" in notes and "outside the calibrated" in notes
    assert math.isfinite(row["decode_pred_ms_calibrated"])


def test_roofline_of_a_real_shape_is_weight_bytes_over_bandwidth():
    cfg = ModelConfig.from_name("llama3_1_8b")
    h100 = load_spec("h100_sxm")
    row = perf.predict(cfg, {"batch": 1, "prompt_len": 512, "new_tokens": 128}, h100)
    from zoo import counts

    floor = counts.decode_mean(cfg, 1, 512, 128).min_bytes / h100.peak_bytes_s
    assert row["decode_pred_ms_roofline"] == pytest.approx(1e3 * floor, rel=0.05)
    assert row["prediction_basis"] == "roofline only (h100_sxm peaks)"
    assert math.isnan(row["decode_pred_ms_calibrated"])


def test_transfer_scales_by_the_ceilings(calibration):
    meta, table = calibration
    c = perf.Calibrated(table, meta)
    src = meta["ceilings"]
    fast = perf.transfer(c, src, {"copy_bytes_s": 2 * src["copy_bytes_s"],
                                  "gemm_flops_fp32": src["gemm_flops_fp32"]}, "fp32")
    k = next(k for k in perf.kernel_list(TINY, 2, 1, 65, "torch") if k.op == "rope")
    t0, _ = c.price(k)
    t1, _ = fast.price(k)
    fixed = c._linear("elementwise", {"op": "rope", "impl": "torch"})[0]
    assert t1 == pytest.approx(fixed + (t0 - fixed) / 2)  # bandwidth x2: the per-byte part halves
    assert "transferred" in perf.predict(TINY, WL, load_spec("cpu"), fast, mode="eager",
                                         ceilings=src)["prediction_basis"]


@pytest.mark.slow
def test_every_row_has_the_predicted_columns(tmp_path):
    _, _, df = run_tiny(tmp_path, "+experiment=gqa_vs_mha")
    for st in ("prefill", "decode"):
        for col in ([f"{st}_pred_ms_roofline", f"{st}_pred_ms_calibrated", f"{st}_pred_error_pct",
                     f"{st}_pred_error_pct_roofline"] + [f"{st}_pred_ms_{m}" for m in perf.MODULES]):
            assert col in df.columns and df[col].notna().all(), col
    assert df.prediction_basis.str.startswith("calibrated on cpu").all()
    # the signed error is calibrated vs measured
    r = df.iloc[0]
    assert r.decode_pred_error_pct == pytest.approx(
        100 * (r.decode_pred_ms_calibrated - r.decode_tpot_ms) / r.decode_tpot_ms)
