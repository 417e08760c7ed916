"""Bottleneck classifier, diagnosis text, roofline plot and the regression check on constructed rows."""

import json
import math
import re

import pandas as pd
import pytest

from sweep.analysis.diagnosis import classify, diagnose
from sweep.report.plots import roofline_plot
from sweep.report.regression import compare


@pytest.mark.parametrize("mfu,mbu,ratio,want", [
    (0.05, 0.85, 1.2, "memory-bound"),
    (0.70, 0.20, 1.4, "compute-bound"),
    (0.02, 0.30, 3.3, "overhead-bound"),
    (0.10, 0.40, 1.5, "memory-bound"),
    (math.nan, 0.5, 1.0, "unknown"),
])
def test_classify(mfu, mbu, ratio, want):
    assert classify(mfu, mbu, ratio) == want


def _row(**kw):
    base = dict(ttft_ms=200.0, decode_tpot_ms=4.6, prefill_roofline_floor_ms=110.0,
                decode_roofline_floor_ms=2.4, prefill_mfu_vs_measured=0.55,
                prefill_mbu_vs_measured=0.05, decode_mfu_vs_measured=0.01,
                decode_mbu_vs_measured=0.65, decode_kv_bytes_share=0.62, prompt_len=4096,
                new_tokens=64, n_kv_heads=32, kv_dtype="bf16")
    return {**base, **kw}


def test_diagnosis_ties_finding_to_design():
    d = diagnose(_row())
    assert d["decode_bound"] == "memory-bound"
    assert "KV reads are 62% of bytes at ~4128 context" in d["diagnosis"]
    assert "fewer KV heads (now 32)" in d["diagnosis"]
    o = diagnose(_row(decode_mbu_vs_measured=0.3, decode_tpot_ms=8.0))
    assert o["decode_bound"] == "overhead-bound" and "3.3x its roofline floor" in o["diagnosis"]
    w = diagnose(_row(decode_kv_bytes_share=0.05))
    assert "memory-bound on weights (95% of bytes)" in w["diagnosis"]


def test_roofline_plot(tmp_path):
    df = pd.DataFrame([dict(state="COMPLETE", param_n_kv_heads=k, prefill_arith_intensity=900.0,
                            prefill_flop_s=4e14, decode_arith_intensity=8.0 / k,
                            decode_flop_s=2e12 / k, peak_flops_measured=7.7e14,
                            peak_bytes_s_measured=2.97e12, peak_flops_datasheet=9.89e14,
                            peak_bytes_s_datasheet=3.35e12) for k in (1, 8, 32)])
    p = roofline_plot(df, tmp_path, "t")
    assert p.exists() and p.stat().st_size > 10_000


def test_html_page_writes_nothing_outside_a_given_folder(tmp_path):
    # compare_fronts --out: plotly.min.js inside the folder given, not beside it
    go = pytest.importorskip("plotly.graph_objects")
    from sweep.report.plots import write_html

    out = tmp_path / "user" / "fronts"
    page = write_html(go.Figure(), out / "fronts.html", js_dir=out)
    assert (out / "plotly.min.js").stat().st_size > 1_000_000
    assert 'src="plotly.min.js"' in page.read_text()
    assert sorted(p.name for p in (tmp_path / "user").iterdir()) == ["fronts"]
    # a study's page: one copy shared in the results folder above it
    study = tmp_path / "results" / "s1"
    page = write_html(go.Figure(), study / "pareto.html")
    assert 'src="../plotly.min.js"' in page.read_text()
    assert (tmp_path / "results" / "plotly.min.js").exists()


def test_compare_flags_regressions_beyond_spread():
    old = pd.DataFrame([dict(n_kv_heads=k, batch=8, decode_tpot_ms=3.0, decode_tpot_ms_min=2.95,
                             decode_tpot_ms_p90=3.05, decode_tok_s=2666.0, ttft_ms=100.0,
                             ttft_ms_min=99.0, ttft_ms_p90=101.0) for k in (1, 8)])
    new = old.copy()
    new.loc[0, ["decode_tpot_ms", "decode_tpot_ms_min", "decode_tpot_ms_p90"]] = [3.6, 3.5, 3.7]
    new.loc[0, "decode_tok_s"] = 2222.0
    # k=8: 6% slower median but spreads overlap -> not a regression
    new.loc[1, ["decode_tpot_ms", "decode_tpot_ms_min", "decode_tpot_ms_p90"]] = [3.18, 3.0, 3.3]
    new.loc[1, "decode_tok_s"] = 2515.0  # its rate 6% lower: judged by its time's spread too
    res = compare(old, new).set_index(["design", "metric"])
    assert res.loc[("n_kv_heads=1, batch=8", "decode_tpot_ms"), "regression"]
    assert res.loc[("n_kv_heads=1, batch=8", "decode_tok_s"), "regression"]
    assert not res.loc[("n_kv_heads=8, batch=8", "decode_tpot_ms"), "regression"]
    assert not res.loc[("n_kv_heads=8, batch=8", "decode_tok_s"), "regression"]
    assert not res.loc[("n_kv_heads=8, batch=8", "ttft_ms"), "regression"]


@pytest.mark.parametrize("evidence,want", [
    (dict(gpu_active_pct=35.0), "overhead-bound"),          # GPU idle most of the window
    (dict(cpu_gpu_ratio=1.8), "overhead-bound"),            # host slower than the GPU
    (dict(dram_pct=82.0, tensor_pct=3.0), "memory-bound"),  # ncu: DRAM near its ceiling
    (dict(tensor_pct=71.0, dram_pct=20.0), "compute-bound"),
    (dict(gpu_active_pct=97.0, cpu_gpu_ratio=0.3), "compute-bound"),  # falls back to MFU/MBU
])
def test_classify_uses_measured_evidence_first(evidence, want):
    # analytic figures alone would say compute-bound (MFU 0.7)
    assert classify(0.7, 0.2, 1.3, **evidence) == want


def test_diagnosis_reports_evidence_and_ncu_bytes():
    d = diagnose(_row(decode_gpu_active_pct=30.0, decode_cpu_gpu_ratio=2.5))
    assert d["decode_bound"] == "overhead-bound" and "GPU active 30%" in d["diagnosis"]
    assert "gpu_active_pct" in d["decode_bound_evidence"]
    n = diagnose(_row(decode_dram_bw_pct_of_measured=85.0, decode_tensor_pipe_pct=1.0,
                      decode_dram_bytes_over_min=1.4))
    assert n["decode_bound"] == "memory-bound" and "1.40x the analytic minimum" in n["diagnosis"]


def test_an_overhead_bound_text_does_not_deny_the_ceiling_it_reaches():
    # a decode at MBU 0.80 with the host 1.2x slower than the GPU read "using neither ceiling",
    # and its evidence named mfu and mbu, which did not decide
    d = diagnose(_row(decode_mbu_vs_measured=0.80, decode_cpu_gpu_ratio=1.2))
    assert d["decode_bound"] == "overhead-bound"
    assert "neither ceiling" not in d["diagnosis"] and "MBU 0.80" in d["diagnosis"]
    assert d["decode_bound_evidence"] == "cpu_gpu_ratio"
    slow = diagnose(_row(decode_mbu_vs_measured=0.3, decode_tpot_ms=8.0))
    assert "using neither ceiling" in slow["diagnosis"]
    assert slow["decode_bound_evidence"].startswith("mfu, mbu, time_over_floor")


def test_advice_only_what_runs_on_the_device():
    slow = dict(decode_mbu_vs_measured=0.3, decode_tpot_ms=8.0, mode="eager", kernels="torch")
    cpu = diagnose(_row(**slow, device="cpu"))["diagnosis"]
    gpu = diagnose(_row(**slow, device="NVIDIA H100 80GB HBM3"))["diagnosis"]
    assert "mode=cudagraph" not in cpu and "kernels=triton" not in cpu
    assert "dominate; fewer launches cut them: fewer, wider layers" in cpu  # a whole sentence
    assert "mode=cudagraph and kernels=triton cut them" in gpu


def test_compare_matches_a_csv_record_with_a_parquet_typed_study():
    # a record read back from CSV (unset sliding_window: NaN, float64; batch 8.0) against the
    # same design from a study's parquet (None in an object column; batch 8): one design, matched
    old = pd.DataFrame({"n_kv_heads": [1], "sliding_window": [float("nan")], "batch": [8.0],
                        "decode_tok_s": [6000.0]})
    new = pd.DataFrame({"n_kv_heads": [1], "sliding_window": pd.Series([None], dtype=object),
                        "batch": [8], "decode_tok_s": [5000.0]})
    res = compare(old, new)
    row = res[res.metric == "decode_tok_s"].iloc[0]
    assert row.regression and round(row.better_pct, 1) == -16.7


def test_compare_matches_a_study_folder_with_its_own_csv(tmp_path):
    # the study's own writer (report.tables.write_table) stores an unset key of a mixed None /
    # text column as "" in trials.parquet, and its trials.csv reads back NaN: the GPU gate of
    # 2026-11-28 (twelfth session) found "no designs in common" between a record and a study
    from sweep.report.regression import load
    from sweep.report.tables import write_table

    df = pd.DataFrame({"state": ["COMPLETE"] * 2, "n_kv_heads": [1, 2],
                       "rope_scaling": pd.Series([None, None], dtype=object),
                       "layer_types": pd.Series([None, "sliding"], dtype=object),
                       "decode_tok_s": [6000.0, 5000.0]})
    write_table(df, tmp_path)
    res = compare(load(tmp_path / "trials.csv"), load(tmp_path))
    assert len(res[res.metric == "decode_tok_s"]) == 2


def test_tables_tell_apart_designs_that_differ_in_kernels_or_mode():
    # the fused_kernels study: six designs alike but for kernels x mode; without those columns
    # two predicted triton rows read identically and the measured table named neither
    from sweep.report.tables import predicted_summary, summary_table

    kinds = [("torch", "eager"), ("torch", "compile"), ("triton", "cudagraph"),
             ("triton", "compile")]
    df = pd.DataFrame({"state": "COMPLETE", "n_kv_heads": 8, "kernels": [k for k, _ in kinds],
                       "mode": [m for _, m in kinds], "batch": 1,
                       "decode_tok_s": [88.9, float("nan"), 903.4, 903.4]})
    for text in (summary_table(df), predicted_summary(df)):
        head = text.splitlines()[0].split()
        assert "kernels" in head and "mode" in head, head
    same = df.assign(kernels="triton", mode="cudagraph")  # constant: not shown
    assert "mode" not in summary_table(same).splitlines()[0].split()
    # the study's objectives shown (moe_vs_dense's params_total and prefill_tok_s were not)
    head = summary_table(df.assign(params_total=1e9, fail_reason=""),
                         ["decode_tok_s", "params_total"]).splitlines()[0].split()
    assert head[-2:] == ["params_total", "fail_reason"]
    # moe_routing's designs differ in routing_skew and batch: both tables name them, the
    # predicted one the study's objectives too (a newcomer read two identical rows, 2026-11-28)
    skewed = df.assign(kernels="triton", mode="cudagraph", routing_skew=[0.0, 1.5, 0.0, 1.5],
                       batch=[8, 8, 64, 64], params_total=1e9, basis_kind="calibrated")
    head = predicted_summary(skewed, ["decode_tok_s", "params_total"],
                             ["maximize", "maximize"]).splitlines()[0].split()
    assert {"routing_skew", "batch"} <= set(head)
    assert head[head.index("basis_kind") - 1] == "params_total"
    assert "routing_skew" in summary_table(skewed).splitlines()[0].split()


def test_a_figure_not_measured_reads_n_a_with_where_its_reason_is():
    """A CPU run's ``peak_mem_bytes`` (NaN with ``peak_mem_bytes_reason``) reads ``n/a`` in the
    console's table, with a line naming the reason's column (it read ``None``, as a figure)."""
    from sweep.report.tables import summary_table

    df = pd.DataFrame({"state": "COMPLETE", "n_kv_heads": [1, 2], "decode_tok_s": [3.0, 2.0],
                       "peak_mem_bytes": [None, None],
                       "peak_mem_bytes_reason": "CPU run: no allocator peak"})
    text = summary_table(df)
    assert "None" not in text and text.count("n/a") == 3  # two rows and the legend
    assert "peak_mem_bytes_reason says why" in text
    measured = summary_table(df.assign(peak_mem_bytes=[5e9, 6e9]))
    assert "n/a" not in measured and "5e+09" in measured


def test_compare_refuses_more_than_two_result_sets_by_name(tmp_path):
    # a shell glob matching a measured and a predicted study passes three paths: one error line
    # naming them, not argparse's "unrecognized arguments"
    from sweep.report.regression import main

    with pytest.raises(ValueError, match="two result sets to compare, OLD and NEW; got 3"):
        main([str(tmp_path)] * 3)


def test_compare_counts_a_design_that_no_longer_completes_as_a_regression(tmp_path, capsys):
    """A design COMPLETE in OLD and FAIL in NEW is a regression of its own, named with NEW's
    state and reason (the gate had matched COMPLETE rows only and passed it); one NEW lacks is
    listed, and judged only with ``--require-all`` (NEW may be a subset); a NEW whose every
    design FAILED is not "no design in common"."""
    from sweep.report.regression import main
    from sweep.report.tables import write_table

    old = pd.DataFrame({"state": "COMPLETE", "n_kv_heads": [1, 2, 4],
                        "decode_tok_s": [6000.0, 5000.0, 4000.0]})
    new = pd.DataFrame({"state": ["COMPLETE", "FAIL"], "n_kv_heads": [1, 2],
                        "decode_tok_s": [6000.0, float("nan")],
                        "fail_reason": ["", "OutOfMemoryError: CUDA out of memory"]})
    old.to_csv(tmp_path / "old.csv", index=False)
    write_table(new, tmp_path)  # a study folder: trials.parquet, as the gate reads NEW
    assert main([str(tmp_path / "old.csv"), str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "0 regression(s) beyond 5% and the spread" in out
    assert "1 of OLD's 3 completed designs completed in NEW" in out
    lines = out.splitlines()
    assert any("n_kv_heads=2" in x and "FAIL" in x and "out of memory" in x for x in lines)
    assert any("n_kv_heads=4" in x for x in lines) and "not judged: NEW may be a subset" in out
    subset = old.head(1)
    subset.to_csv(tmp_path / "subset.csv", index=False)
    assert main([str(tmp_path / "old.csv"), str(tmp_path / "subset.csv")]) == 0  # a subset
    assert main([str(tmp_path / "old.csv"), str(tmp_path / "subset.csv"), "--require-all"]) == 1
    every_fail = new.assign(state="FAIL")
    every_fail.to_csv(tmp_path / "fail.csv", index=False)
    capsys.readouterr()
    assert main([str(tmp_path / "old.csv"), str(tmp_path / "fail.csv")]) == 1
    assert "2 design(s) of OLD that NEW holds but did not complete" in capsys.readouterr().out
    assert main([str(tmp_path / "old.csv"), str(tmp_path / "old.csv")]) == 0


def test_the_reports_advice_is_for_the_fronts_best_design(monkeypatch):
    """report.html's "Design advice" names the front's best design in the first objective (it
    took the front's first row, in trial order: on an M4 Max the 13.5 tok/s design, where the
    front held one at 94.7)."""
    import sweep.analysis.advice as adv
    from sweep.report.html_report import advice, best_on_front

    front = pd.DataFrame({"state": "COMPLETE", "number": [0, 1, 2],
                          "param_d_model": [4864, 2048, 3072],
                          "decode_tok_s": [13.5, 94.7, 40.0], "kv_bytes": [3.0, 1.0, 2.0]})
    assert best_on_front(front, "decode_tok_s", "maximize").param_d_model == 2048
    assert best_on_front(front, "kv_bytes", "minimize").param_d_model == 2048
    assert best_on_front(front.assign(decode_tok_s=float("nan")), "decode_tok_s",
                         "maximize").param_d_model == 4864  # no figure: any row
    seen = []
    monkeypatch.setattr(adv, "advise_study_row", lambda meta, row, cal_dir: seen.append(row)
                        or {"findings": [], "alternatives": [], "target": "m4_max",
                            "basis": "roofline"})
    page = advice({"objectives": ["decode_tok_s"], "directions": ["maximize"],
                   "hardware_spec": {"kind": "gpu"}}, front)
    assert seen[0].param_d_model == 2048 and "For d_model=2048 " in page


def test_the_console_table_of_a_large_study_is_cut_and_says_so():
    """A predict-only study of 2400 designs printed 2400 rows at its end: the console's table
    stops at ``most`` rows and counts the rest."""
    from sweep.report.tables import summary_table

    df = pd.DataFrame({"state": "COMPLETE", "n_kv_heads": range(100), "decode_tok_s": 1.0})
    text = summary_table(df, most=60)
    assert len(text.splitlines()) == 1 + 60 + 1 and "40 more rows in trials.csv" in text
    assert "more rows" not in summary_table(df.head(60), most=60)


def test_a_design_field_left_unset_reads_none_not_n_a():
    """In report.html a design without a sliding window reads ``none`` in ``sliding_window``
    (it read ``n/a``, "not measured here", as a figure would); a figure not measured still
    reads ``n/a``."""
    from sweep.report.html_report import _frame

    page = _frame(pd.DataFrame({"param_sliding_window": [4096.0, float("nan")],
                                "decode_tok_s": [1.0, float("nan")]}))
    cells = re.findall(r"<td>(.*?)</td>", page)
    assert cells[0] == "4,096" and cells[2] == "none" and "n/a" in cells[3]  # as other counts


def test_the_predicted_table_names_the_attention_kind_that_sets_designs_apart():
    """attention_kind's predicted table: the latent-attention design is told apart by its
    ``kv_lora_rank`` (its row read like a plain GQA design's), QK-norm and sinks likewise;
    columns that do not vary stay out."""
    from sweep.report.tables import predicted_summary

    df = pd.DataFrame({"state": "COMPLETE", "n_kv_heads": 8, "decode_tok_s": [900.0, 800.0],
                       "kv_lora_rank": [0, 512], "qk_norm": ["none", "none"],
                       "basis_kind": "calibrated"})
    head = predicted_summary(df).splitlines()[0].split()
    assert "kv_lora_rank" in head and "qk_norm" not in head


def test_a_queued_design_leaves_the_switches_boolean(tmp_path):
    """A grid cut short (``study.n_trials`` under the grid's size) keeps its other designs queued
    (WAITING), their rows empty: the switch columns (booleans and NaN) were stored as the text
    'False' / 'nan', and whatif and the report's advice failed on every design ("invalid literal
    for int() with base 10: 'False'")."""
    from sweep.analysis.targets import config_of
    from sweep.report.plots import caption
    from sweep.report.tables import load_study, write_table

    done = {"state": "COMPLETE", "d_model": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8,
            "head_dim": 64, "ffn_dim": 8192, "qkv_bias": False, "tie_embeddings": True,
            "batch": 8, "prompt_len": 1024, "new_tokens": 64}
    df = pd.DataFrame([done, {"state": "WAITING"}])
    write_table(df, tmp_path)
    (tmp_path / "study.json").write_text(json.dumps(  # (a study's keys: load_study checks them)
        {"study": "s", "objectives": [], "directions": [], "workload": {}, "hardware_spec": {}}))
    _, back = load_study(tmp_path)
    assert str(back["qkv_bias"].dtype) == "boolean" and back["tie_embeddings"][0]
    assert back["qkv_bias"].isna()[1]
    cfg = config_of(back.iloc[0])
    assert cfg.tie_embeddings is True and cfg.qkv_bias is False
    assert "batch 8, prompt 1024, 64 new tokens" in caption(back)


def test_compare_refuses_studies_of_other_hardware(tmp_path, capsys):
    # two predict-only studies, on an H200 and an MI300X, came out as "3 regression(s)"; a
    # study measured on an H100 against one predicted on it is no regression check either
    from sweep.report.regression import main

    rows = pd.DataFrame({"state": "COMPLETE", "n_kv_heads": [1, 2],
                         "decode_tok_s": [6000.0, 5000.0]})
    h200 = rows.assign(predicted=True, hardware_spec="h200")
    mi300x = rows.assign(predicted=True, hardware_spec="mi300x", decode_tok_s=[3000.0, 2500.0])
    h100 = rows.assign(device="NVIDIA H100 80GB HBM3", hardware_spec="h100_sxm")
    h100_pred = rows.assign(predicted=True, hardware_spec="h100_sxm")
    for name, df in (("h200", h200), ("mi300x", mi300x), ("h100", h100), ("h100p", h100_pred)):
        df.to_csv(tmp_path / f"{name}.csv", index=False)
    p = {n: str(tmp_path / f"{n}.csv") for n in ("h200", "mi300x", "h100", "h100p")}
    assert main([p["h200"], p["mi300x"]]) == 2
    err = capsys.readouterr().err
    assert "predicted on h200" in err and "predicted on mi300x" in err and "compare_fronts" in err
    assert main([p["h100"], p["h100p"]]) == 2
    assert "measured on NVIDIA H100 80GB HBM3" in capsys.readouterr().err
    assert main([p["h200"], p["h200"]]) == 0  # the same hardware: compared


def test_a_predicted_studys_advice_is_priced_as_its_rows_were(tmp_path):
    # a predict-only study on an H200, its rows "calibrated on NVIDIA H200": the report's advice
    # said "roofline x stated efficiencies of h200" (it looked for this machine's calibration)
    import dataclasses

    from sweep.analysis.advice import advise_study_row
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.targets import predict_designs
    from zoo import ModelConfig

    spec = load_spec("h200")
    cfg = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 64}
    (row,) = predict_designs([(cfg, wl, "cudagraph")], spec)
    meta = {"predict": True, "hardware_spec": dataclasses.asdict(spec), "workload": wl,
            "mode": "cudagraph", "env": {"device": "cpu"}}
    r = advise_study_row(meta, pd.Series(row), tmp_path)
    assert "H200" in r["basis"] and "stated efficiencies" not in r["basis"], r["basis"]


def test_a_predicted_studys_advice_uses_the_calibration_file_it_was_given(tmp_path):
    # calibration=FILE priced a predict-only study's rows from FILE; its report's advice was
    # priced from the target's shipped calibration all the same
    import dataclasses
    import shutil

    from sweep.analysis import calibration_store as store
    from sweep.analysis.advice import advise_study_row
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.pricing import Calibrated
    from sweep.analysis.targets import predict_designs
    from zoo import ModelConfig

    h100 = sorted(p for p in store.SHIPPED_DIR.glob("*.json") if "H100" in p.read_text()[:2000])
    given = tmp_path / "mine.json"
    shutil.copy(h100[0], given)
    shutil.copy(h100[0].with_suffix(".parquet"), given.with_suffix(".parquet"))
    spec = load_spec("h200")
    cfg = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    wl = {"batch": 1, "prompt_len": 512, "new_tokens": 64}
    (row,) = predict_designs([(cfg, wl, "cudagraph")], spec,  # the study's rows, from FILE
                             Calibrated(store.load_file(given)))
    meta = {"predict": True, "hardware_spec": dataclasses.asdict(spec), "workload": wl,
            "mode": "cudagraph", "env": {"device": "cpu"}, "calibration": str(given)}
    r = advise_study_row(meta, pd.Series(row), tmp_path)
    assert "H100" in r["basis"]
    # priced as predict_on priced the row: the H100's file transferred to the H200 (its raw
    # entries had read the design 1.106 ms against the row's 0.867)
    assert r["predicted"]["decode_pred_ms"] == pytest.approx(row["decode_tpot_ms"], rel=0.02)
    given.unlink()  # the file gone since: the target's shipped one, as before
    assert "H200" in advise_study_row(meta, pd.Series(row), tmp_path)["basis"]


def test_a_report_says_when_its_rows_rest_on_different_ceilings():
    # a study resumed after the ceilings were measured again: rows against 6.3 and 38.9 GB/s,
    # the report's table showing only the last
    from sweep.report.html_report import ceilings_note

    same = pd.DataFrame({"peak_bytes_s_measured": [6.29e9, 6.30e9]})
    assert ceilings_note(same) == "" and ceilings_note(pd.DataFrame({"x": [1]})) == ""
    note = ceilings_note(pd.DataFrame({"peak_bytes_s_measured": [6.29e9, 3.89e10, 3.89e10]}))
    assert "2 different copy ceilings, 6.29 to 38.9 GB/s" in note


def test_compare_refuses_a_file_that_is_not_a_trials_table(tmp_path):
    # any CSV without design columns gave an IndexError traceback from pandas' merge; an empty
    # one "No columns to parse from file", naming no file
    from sweep.report.regression import load

    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="other.csv: not a trials table"):
        load(other)
    other.write_text("")
    with pytest.raises(ValueError, match="other.csv: unreadable as a trials table"):
        load(other)


def test_compare_reads_a_study_whose_every_design_failed():
    # such a study has states and no figure: refused as "not a trials table", where the gate
    # needs its FAILs judged (exit 1)
    import tempfile
    from pathlib import Path

    from sweep.report.regression import load

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "trials.csv"
        pd.DataFrame({"state": ["FAIL"], "n_kv_heads": [1], "fail_reason": ["boom"]}).to_csv(f)
        assert len(load(f, every_state=True)) == 1
