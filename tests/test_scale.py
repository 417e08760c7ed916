"""Studies at scale (CPU): constraints pruned before any work, sampled decode modes, the front
comparison, the HTML report, several workers on shared storage (a journal file; PostgreSQL where
`.ci/run` started one), more faults, and bad input that must be refused by name."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from sweep.plan import plan_from_config
from sweep.report import fronts as compare_fronts
from tests.helpers import compose_cfg, run_tiny, tiny_overrides

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_constraint_prunes_before_any_work(tmp_path):
    plan, study, df = run_tiny(tmp_path, "+experiment=ffn_width")  # CPU band: <= 6e5 params
    assert len(df) == 3
    pruned = df[df.state == "PRUNED"]
    assert list(pruned.ffn_dim) == [704]
    assert pruned.fail_reason.iloc[0].startswith(
        "pruned: params_non_embedding = 6.232e+05 outside [-inf, 6e+05]")
    n = int(pruned.number.iloc[0])
    assert not (plan.results / "trials" / f"{n:04d}").exists()  # no child was started
    assert (df[df.state == "COMPLETE"].params_non_embedding <= 6e5).all()


def test_mode_is_a_design_parameter(tmp_path):
    plan, study, df = run_tiny(tmp_path, "+experiment=fused_kernels")
    by_mode = df.set_index("mode")
    assert by_mode.loc["eager", "state"] == "COMPLETE"
    assert by_mode.loc["cudagraph", "state"] == "FAIL"
    assert "invalid design: mode=cudagraph needs a CUDA GPU" in by_mode.loc["cudagraph",
                                                                             "fail_reason"]
    # the report of the study is written with its sections
    page = (plan.results / "report.html").read_text()
    for section in ("Hardware and software", "Design space", "Pareto front", "Roofline",
                    "Bottlenecks and diagnosis", "Trials", "optuna-dashboard sqlite:///"):
        assert section in page
    assert "data:image/png;base64," in page and "mode=cudagraph needs a CUDA GPU" in page


def test_kernel_compile_error_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    plan, study, df = run_tiny(tmp_path, "+experiment.space.n_kv_heads.choices=[1,2]",
                           "fault=measure:compile@0")
    assert list(df.state) == ["FAIL", "COMPLETE"]
    assert df.fail_reason.iloc[0].startswith("kernel compile error: ")
    assert "not_defined_anywhere" in df.fail_reason.iloc[0]


def test_hypervolume_and_dominance():
    ref = np.array([4.0, 4.0])
    assert compare_fronts.hypervolume(np.array([[1.0, 3.0], [3.0, 1.0]]), ref) == 5.0
    assert compare_fronts.hypervolume(np.array([[5.0, 1.0]]), ref) == 0.0

    def study(name, pts):
        df = pd.DataFrame([{"number": i, "state": "COMPLETE", "param_x": i, "tok_s": t,
                            "kv": k} for i, (t, k) in enumerate(pts)])
        return name, {"env": {"device": "gpu"}, "workload": {"batch": 1}}, df

    a = study("a", [(100.0, 4.0), (80.0, 2.0), (50.0, 3.0)])  # (50, 3) dominated within a
    b = study("b", [(120.0, 4.0), (60.0, 1.0)])
    table, summary = compare_fronts.compare([a, b], ["tok_s", "kv"], ["maximize", "minimize"])
    fa, fb = summary["studies"]["a"], summary["studies"]["b"]
    assert fa["front_size"] == 2 and fb["front_size"] == 2
    # reference (min space): tok -50 - 0.1 * 70 -> 43 tok/s; kv 4 + 0.1 * 3 = 4.3
    assert summary["reference_point"] == pytest.approx([43.0, 4.3])
    assert fa["hypervolume"] == pytest.approx(57 * 0.3 + 37 * 2)  # (100, 4) and (80, 2)
    assert fb["hypervolume"] == pytest.approx(77 * 0.3 + 17 * 3)  # (120, 4) and (60, 1)
    assert fa["hypervolume_fraction"] == pytest.approx(91.1 / (77 * 3.3))
    row = table.set_index(["study", "design"])
    assert row.loc[("a", "x=0"), "dominated_by"] == "b: x=0"  # 120 tok/s at the same kv
    assert not row.loc[("a", "x=0"), "on_combined_front"]
    assert row.loc[("a", "x=1"), "on_combined_front"]  # (80, 2): nothing in b beats it
    # x=0 in both studies is one design measured twice: said so, with how far apart
    assert summary["warnings"] == ["a: x=0 is dominated by the same design in b (tok_s +20.0%, "
                                   "kv +0.0%): one design measured twice, apart by run-to-run "
                                   "spread or the machine's state, not by its design "
                                   "(sweep.cli.compare judges the two against their spread)"]
    # on two devices (two predict-only studies' targets) the same design is apart by the device:
    # said once, as such, never as run-to-run spread
    b2 = ("b", {"env": {"device": "other gpu"}, "workload": {"batch": 1}}, b[2])
    _, summary = compare_fronts.compare([a, b2], ["tok_s", "kv"], ["maximize", "minimize"])
    assert len(summary["warnings"]) == 1
    assert summary["warnings"][0].startswith("studies ran on different devices")


def test_compare_fronts_cli(tmp_path, measured_study):
    # kv_quant's CPU space is n_kv_heads alone; torch kernels spare the Triton interpreter
    _, _, _ = run_tiny(tmp_path, "+experiment=kv_quant", "study.n_trials=3", "model.kernels=torch")
    dirs = [str(measured_study[0].results)] + sorted(
        str(p) for p in tmp_path.iterdir() if (p / "study.json").exists())
    out = tmp_path / "fronts"
    r = subprocess.run([sys.executable, "-m", "sweep.cli.compare_fronts", *dirs, "--objectives",
                        "decode_tok_s:max", "kv_bytes_per_token:min", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "hypervolume" in r.stdout and "dominated_by" in r.stdout
    summary = json.loads((out / "fronts.json").read_text())
    assert set(summary["studies"]) == {"gqa_vs_mha", "kv_quant"}
    assert all(s["hypervolume"] > 0 for s in summary["studies"].values())
    assert (out / "fronts.png").stat().st_size > 10_000 and (out / "fronts.html").exists()
    assert len(pd.read_csv(out / "fronts.csv")) >= 2
    bad = subprocess.run([sys.executable, "-m", "sweep.cli.compare_fronts", *dirs, "--objectives",
                          "decode_j_per_token:min", "decode_tok_s:max"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "has no column(s) ['decode_j_per_token']" in bad.stderr


def _check_workers(tmp_path, storage: str, study_name: str):
    plan, study, df = run_tiny(tmp_path, "+experiment=gqa_vs_mha", "sweep.workers=2",
                           f"study.storage={storage}", f"study.name={study_name}")
    assert plan.workers == 2
    # every design of the grid ran exactly once, none lost, none twice
    trials = [t for t in study.get_trials() if not t.user_attrs.get("spare")]
    assert sorted(t.params["n_kv_heads"] for t in trials) == [1, 2, 4, 8]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert len(df) == 4 and sorted(df.n_kv_heads) == [1, 2, 4, 8]
    assert df.worker_pid.nunique() == 2  # both workers measured designs
    assert all((plan.results / f"worker{i}.log").exists() for i in range(2))
    # a re-run finds everything done and measures nothing more
    _, study2, df2 = run_tiny(tmp_path, "+experiment=gqa_vs_mha", "sweep.workers=2",
                          f"study.storage={storage}", f"study.name={study_name}")
    assert len(df2) == 4


def test_two_workers_share_a_journal_file(tmp_path):
    _check_workers(tmp_path, str(tmp_path / "optuna.journal"), "workers-journal")


def test_two_workers_share_postgresql(tmp_path):
    """Against the PostgreSQL server that `.ci/run` starts on loopback (DESIGNZOO_TEST_PG_URL).
    In CI its absence is a failure, not a skip."""
    url = os.environ.get("DESIGNZOO_TEST_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI must provide DESIGNZOO_TEST_PG_URL (.ci/run starts PostgreSQL)")
        pytest.skip("no PostgreSQL server (set DESIGNZOO_TEST_PG_URL; .ci/run starts one)")
    name = f"workers-pg-{os.getpid()}-{tmp_path.name}"
    _check_workers(tmp_path, url, name)


@pytest.mark.parametrize("override,message", [
    (["+experiment=no_such_experiment"], "Could not find 'experiment/no_such_experiment'"),
    (["study.storage=postgresql://nobody@127.0.0.1:9/none", "study.n_trials=1"],
     "cannot open study storage 'postgresql://nobody@127.0.0.1:9/none'"),
    (["workload.batch=eight"], "workload.batch"),
    (["+experiment=gqa_vs_mha", "study.objectives=[decode_j_per_token]",
      "study.directions=[minimize]"], "need energy from NVML: add profile=nvml"),
    (["+experiment.constraints.param_count={high: 1}"], "unknown constraint figure(s) "
                                                         "['param_count']"),
    (["sweep.workers=0"], "sweep.workers=0 must be at least 1"),
    # on the CPU fallback the real designs' constraints are checked too (constraints_cpu set)
    (["+experiment=gqa_vs_mha", "+experiment.constraints.param_non_embedding.low=1"],
     "unknown constraint figure(s) ['param_non_embedding']"),
])
def test_bad_input_is_refused_by_name(tmp_path, override, message):
    r = subprocess.run([sys.executable, "-m", "sweep", *tiny_overrides(tmp_path), *override],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert message in r.stderr + r.stdout, r.stderr[-2000:]


def test_unknown_experiment_lists_the_available_ones(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sweep", *tiny_overrides(tmp_path),
                        "+experiment=gqa"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0
    for name in ("gqa_vs_mha", "kv_quant", "fused_kernels", "attention_shape"):
        assert name in r.stderr


def _study_dir(path, rows, wall):
    path.mkdir()
    (path / "study.json").write_text(json.dumps({  # (a study's keys: load_study checks them)
        "run_wall_s": wall, "workers": 2, "study": path.name, "objectives": [], "directions": [],
        "workload": {}, "hardware_spec": {}}))
    pd.DataFrame(rows).to_parquet(path / "trials.parquet")
    return path


def test_workers_check(tmp_path):
    from sweep.report.workers_scaling import check

    def row(k, tpot, gpu=None, start=None, end=None, state="COMPLETE"):
        return {"n_kv_heads": k, "state": state, "decode_tpot_ms": tpot,
                "decode_tpot_ms_min": tpot * 0.99, "decode_tpot_ms_p90": tpot * 1.01,
                "ttft_ms": 50.0, "ttft_ms_min": 49.0, "ttft_ms_p90": 51.0, "worker_gpu": gpu,
                "trial_start": start, "trial_end": end}

    one = _study_dir(tmp_path / "one", [row(k, 2.0 + k) for k in (1, 2, 4, 8)], 100.0)
    t = "2026-11-22T10:00:{:02d}"
    good = _study_dir(tmp_path / "good", [
        row(1, 3.0, "0", t.format(0), t.format(10)), row(2, 4.02, "1", t.format(0), t.format(9)),
        row(4, 6.0, "0", t.format(11), t.format(20)), row(8, 10.0, "1", t.format(10), t.format(19)),
    ], 55.0)
    res = check(one, good)
    assert res["speedup"] == pytest.approx(100 / 55) and all(res["ok"].values())
    bad = _study_dir(tmp_path / "bad", [
        row(1, 3.0, "0", t.format(0), t.format(10)), row(1, 3.0, "1", t.format(0), t.format(9)),
        row(4, 7.0, "0", t.format(5), t.format(20)), row(8, 10.0, "1", t.format(10), t.format(19)),
    ], 80.0)
    res = check(one, bad)
    assert res["integrity"]["duplicates"] == 1 and res["integrity"]["missing"] == [["2"]]
    assert res["isolation"]["overlapping_trials_on_a_gpu"] == ["0"]  # GPU 0 ran two at once
    assert not res["ok"]["agreement"]  # 7.0 vs 6.0 ms: spreads apart, 17% off
    assert not res["ok"]["speedup"]  # 100/80 = 1.25x


def test_a_worker_never_runs_an_unqueued_design(tmp_path):
    """A worker that asks after the queue ran dry gets a spare trial: pruned before any work,
    not counted as a design, not in the table."""
    from dataclasses import replace

    from sweep.objective import Objective
    from sweep.report import tables
    from sweep.storage import finished, open_study

    plan = plan_from_config(compose_cfg(tiny_overrides(tmp_path, "+experiment=gqa_vs_mha")))
    plan = replace(plan, queue_only=True)
    study = open_study(plan)
    obj = Objective(plan, {}, 4)
    study.optimize(obj, n_trials=1)  # nothing queued
    (t,) = study.get_trials()
    assert t.state == optuna.trial.TrialState.PRUNED and t.user_attrs["spare"] is True
    assert finished(study) == 0 and tables.trials_frame(study).empty
    assert not (plan.results / "trials").exists()


def test_compare_tells_apart_designs_that_differ_in_weight_format_or_a_switch():
    """Two rows of one shape that differ only in ``weight_dtype`` or a kernel switch are two
    designs: ``compare`` matches each with its own (it matched them as one before)."""
    import pandas as pd

    from sweep.report.regression import compare

    base = {"n_heads": 8, "n_kv_heads": 2, "head_dim": 16, "d_model": 128, "n_layers": 2,
            "ffn_dim": 352, "batch": 2, "prompt_len": 16, "new_tokens": 4, "mode": "eager",
            "state": "COMPLETE", "switch_pdl": True, "weight_dtype": "auto"}
    rows = [dict(base, decode_tpot_ms=1.0), dict(base, weight_dtype="int4_g128",
                                                 decode_tpot_ms=0.5),
            dict(base, switch_pdl=False, decode_tpot_ms=2.0)]
    old, new = pd.DataFrame(rows), pd.DataFrame(rows)
    res = compare(old, new)
    t = res[res.metric == "decode_tpot_ms"]
    assert len(t) == 3 and (t.old == t.new).all() and not t.regression.any()
    # and their labels tell them apart: a key that varies among the compared designs is shown
    assert t.design.nunique() == 3, t.design.tolist()
    assert any("weight_dtype=int4_g128" in d for d in t.design)
    assert all("prompt_len" not in d for d in t.design)  # the same for all: not shown


def test_predicted_fronts_on_two_specs_are_said_apart():
    """Two predict-only studies priced on different hardware specs: both study.json read device
    "predicted (no device)", and compare_fronts joined them into one front with no warning."""
    def study(name, hw):
        df = pd.DataFrame([{"number": 0, "state": "COMPLETE", "param_x": 0, "tok_s": 1.0,
                            "kv": 1.0}])
        return name, {"predict": True, "env": {"device": "predicted (no device)"},
                      "hardware_spec": {"name": hw}, "workload": {"batch": 1}}, df

    _, summary = compare_fronts.compare([study("a", "h200"), study("b", "mi300x")],
                                        ["tok_s", "kv"], ["maximize", "minimize"])
    assert any("different devices" in w and "predicted on mi300x" in w
               for w in summary["warnings"])
    _, same = compare_fronts.compare([study("a", "h200"), study("b", "h200")], ["tok_s", "kv"],
                                     ["maximize", "minimize"])
    assert not any("different devices" in w for w in same["warnings"])
