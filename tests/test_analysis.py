"""Derived figures: MFU/MBU against both peaks, NaN with a reason where a peak is unknown."""

import math

import pytest

from sweep.analysis.derived import derived
from sweep.analysis.hardware import load_spec
from zoo import ModelConfig, counts


def test_mfu_mbu_against_both_peaks():
    cfg = ModelConfig.from_name("llama3_1_8b")
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 128}
    measured = {"ttft_ms": 50.0, "decode_tpot_ms": 6.0}
    ceil = {"copy_bytes_s": 3.0e12, "gemm_flops_bf16": 800e12}
    row = derived(cfg, wl, measured, load_spec("h100_sxm"), ceil)
    dec = counts.decode_mean(cfg, 1, 512, 128)
    assert row["decode_mbu_vs_measured"] == pytest.approx(dec.min_bytes / 6e-3 / 3.0e12)
    assert row["decode_mbu_vs_datasheet"] == pytest.approx(dec.min_bytes / 6e-3 / 3.35e12)
    pf = counts.prefill(cfg, 1, 512)
    assert row["prefill_mfu_vs_measured"] == pytest.approx(pf.matmul_flops / 0.05 / 800e12)
    assert row["prefill_mfu_vs_datasheet"] == pytest.approx(pf.matmul_flops / 0.05 / 989.4e12)
    # 8B decode at batch 1 moves ~15 GB/step: 6 ms is above the 5 ms floor at 3 TB/s
    assert 4.5 < row["decode_roofline_floor_ms"] < 5.5 and not row["decode_below_floor"]
    fast = derived(cfg, wl, dict(measured, decode_tpot_ms=3.0), load_spec("h100_sxm"), ceil)
    assert fast["decode_below_floor"]  # faster than the bandwidth allows: a measurement bug


def test_unknown_peaks_are_nan_with_reason():
    cfg = ModelConfig.from_name("tiny")
    row = derived(cfg, {"batch": 1, "prompt_len": 8, "new_tokens": 4},
                  {"ttft_ms": 1.0, "decode_tpot_ms": 1.0}, load_spec("cpu"),
                  {"error": "ceilings measurement failed: boom"})
    for st in ("prefill", "decode"):
        for fig in ("mfu", "mbu"):
            assert math.isnan(row[f"{st}_{fig}_vs_datasheet"])
            assert "no datasheet peak for cpu" in row[f"{st}_{fig}_vs_datasheet_reason"]
            assert math.isnan(row[f"{st}_{fig}_vs_measured"])
            assert "boom" in row[f"{st}_{fig}_vs_measured_reason"]
    for peak in ("peak_flops", "peak_bytes_s"):  # the peaks themselves: NaN with the reason
        assert math.isnan(row[f"{peak}_datasheet"]) and "cpu states none" in row[
            f"{peak}_datasheet_reason"]
        assert math.isnan(row[f"{peak}_measured"]) and "boom" in row[f"{peak}_measured_reason"]


def test_prediction_check_counts_the_rows_it_did_not_price():
    """``prediction_check.summary``: a row with no calibrated error is counted under its stage's
    reason (``mode=compile``), else the design's (``prediction_reason``: a calibration that
    cannot price it); a study with no errors at all counts none."""
    import pandas as pd

    from sweep.report.prediction_check import summary

    nan = float("nan")
    df = pd.DataFrame({"state": ["COMPLETE"] * 4,
                       "prefill_pred_error_pct": [1.0, nan, nan, 2.0],
                       "decode_pred_error_pct": [1.0, nan, nan, nan],
                       "decode_pred_reason": [None, None, None, "mode=compile"],
                       "prediction_reason": [None, "no launch cost", "no launch cost", None]})
    got = summary(df)
    assert got["prefill"]["calibrated"]["n"] == 2
    assert got["prefill"]["not_predicted"] == {"no launch cost": 2}
    assert got["decode"]["not_predicted"] == {"no launch cost": 2, "mode=compile": 1}
    assert summary(df.drop(columns=["prefill_pred_error_pct"]))["prefill"]["not_predicted"] == {}


def test_prediction_check_leaves_out_the_contended_rows():
    """A row measured while another process used the device (``contended``) is left out of the
    error statistics and counted, as ``compare`` leaves it out (a busy CPU's rows read 247%
    median error against 23% measured alone)."""
    import pandas as pd

    from sweep.report.prediction_check import summary

    df = pd.DataFrame({"state": ["COMPLETE"] * 3, "contended": [False, True, False],
                       "decode_pred_error_pct": [2.0, 250.0, -4.0],
                       "prefill_pred_error_pct": [1.0, 90.0, 1.0]})
    got = summary(df)
    assert got["decode"]["calibrated"]["n"] == 2 and got["contended_left_out"] == 1
    assert got["decode"]["calibrated"]["median_abs_pct"] == 3.0
    assert summary(df.drop(columns=["contended"]))["decode"]["calibrated"]["n"] == 3


def test_prediction_check_judges_the_roofline_on_the_calibrated_rows():
    """The roofline's error is taken on the rows the calibrated one is (the docstring's "same
    rows"): a row the calibration did not price (mode=compile) had counted for the roofline
    only, so the two medians compared different sets."""
    import pandas as pd

    from sweep.report.prediction_check import summary

    nan = float("nan")
    df = pd.DataFrame({"state": ["COMPLETE"] * 3,
                       "decode_pred_error_pct": [1.0, -2.0, nan],
                       "decode_pred_error_pct_roofline": [10.0, -20.0, 90.0]})
    got = summary(df)["decode"]
    assert got["roofline"]["n"] == got["calibrated"]["n"] == 2
    assert got["roofline"]["median_abs_pct"] == 15.0
    alone = summary(df.drop(columns=["decode_pred_error_pct"]))["decode"]  # none calibrated
    assert alone["roofline"]["n"] == 3


def test_prediction_check_prints_four_significant_digits():
    from sweep.report.labels import sig4

    assert sig4({"a": 1.23456789, "b": [0.000123456, {"n": 3}]}) == {"a": 1.235,
                                                                  "b": [0.0001235, {"n": 3}]}


def test_the_validation_table_marks_the_pairs_measured_beside_another_job():
    """``validate``'s table says which pairs were measured while another process used the
    device, and how many (a CPU run's decode median of 257% read as the model's alone; only
    the console had said so)."""
    import pandas as pd

    from sweep.analysis import validation

    df = pd.DataFrame({"name": ["a", "b", "c"], "decode_tpot_ms": [1.0, 2.0, 3.0],
                       "decode_pred_error_pct": [1.0, -2.0, 257.0],
                       "contended": [False, None, True]})
    s = validation.summary(df)
    assert s["contended"] == 1 and s["rows"] == 3
    text = validation.markdown(df, s, "heldout_cpu")
    assert "1 of 3 pairs were measured while another process used the device" in text
    assert "contended" in text.split("\n\n")[-1].splitlines()[0]  # a column of the pairs' table
    assert "were measured while" not in validation.markdown(
        df.drop(columns="contended"), validation.summary(df.drop(columns="contended")), "t")


def test_prediction_check_prints_the_per_module_errors(tmp_path, capsys):
    """A study profiled per module: the per-module errors are printed, not only written by
    ``--out`` (the README says the check gives them per stage and per module)."""
    import pandas as pd

    from sweep.report.prediction_check import main

    rows = pd.DataFrame({"decode_tpot_ms": [1.0, 2.0], "decode_pred_error_pct": [2.0, -1.0],
                         "decode_share_err_pts_max": [3.0, 1.0],
                         "decode_share_err_pts_attention": [3.0, -1.0],
                         "decode_share_err_pts_ffn": [0.5, 1.0]})
    rows.to_csv(tmp_path / "rows.csv", index=False)
    assert main([str(tmp_path / "rows.csv")]) in (0, None)
    out = capsys.readouterr().out
    assert "per module" in out and '"attention"' in out and '"median_abs_pts": 2' in out


def test_a_calibration_without_gemm_entries_says_so():
    # a device's calibration measured for elementwise kernels only (a CPU run in bf16): a GEMM's
    # price is a KeyError naming what is missing (the caller's "cannot predict"), not pandas'
    # AttributeError on a column the table never had
    import pandas as pd
    import pytest

    from sweep.analysis.calibration_store import Calibration
    from sweep.analysis.pricing import Calibrated

    t = pd.DataFrame({"kind": ["launch"], "op": ["graph_gap"], "time_s": [1e-6], "family": ["x"]})
    for table in (t, None):
        with pytest.raises(KeyError, match="no bf16 GEMM"):
            Calibrated(Calibration({"device": "cpu"}, table)).gemm(
                {"M": 8, "N": 64, "K": 64, "dtype": "bf16"})


def test_designs_all_pruned_by_the_experiments_budget_name_the_way_out():
    # a config.json of another size under gqa_vs_mha's 1B budget: every real design pruned; the
    # line says which override lifts the budget
    # (the constraints' names from the rows' pruned_by, not parsed out of their reason's text)
    import pandas as pd

    from sweep.analysis.targets import predict_designs
    from sweep.report.tables import predicted_summary
    from zoo import ModelConfig

    cfg = ModelConfig.from_name("llama3_1_8b")
    wl = {"batch": 1, "prompt_len": 128, "new_tokens": 8}
    rows = predict_designs([(cfg, wl, "cudagraph")], None, constraints={
        "params_non_embedding": {"low": 0.8e9, "high": 1.3e9}, "kv_bytes_per_token": {"high": 1e4},
        "params_total": {"low": 1e9}})
    assert rows[0]["state"] == "PRUNED"
    assert rows[0]["pruned_by"] == "params_non_embedding,kv_bytes_per_token"
    df = pd.DataFrame(rows * 2)
    text = predicted_summary(df)
    assert "'~experiment.constraints.params_non_embedding'" in text
    assert "'~experiment.constraints.kv_bytes_per_token'" in text
    assert "params_total'" not in text  # within its band
    failed = df.assign(state="FAIL", fail_reason="cannot predict: x").drop(columns="pruned_by")
    assert "lifts" not in predicted_summary(failed)


def test_prediction_check_refuses_a_study_named_twice(tmp_path, capsys):
    # NAME NAME doubled n (4 -> 8) and moved the p90
    import pytest

    from sweep.report.prediction_check import main

    with pytest.raises(SystemExit) as e:
        main([str(tmp_path), str(tmp_path) + "/"])
    assert e.value.code == 2 and "named twice" in capsys.readouterr().err
