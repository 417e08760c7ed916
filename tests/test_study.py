"""The study records failed trials with their reasons and goes on; it resumes without losing trials."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest

from tests.helpers import run_tiny, tiny_overrides

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_failures_are_recorded_and_the_study_goes_on(tmp_path):
    plan, study, df = run_tiny(
        tmp_path, "experiment.name=faults", "+experiment.space.n_kv_heads.choices=[1,2,3,4,8]",
        "fault='measure:crash@1,measure:oom@3,start:nan@4'")
    assert len(df) == 5  # the whole grid ran despite four failures
    by_n = df.set_index("number")
    invalid = df[df.n_kv_heads == 3].iloc[0]
    assert invalid["state"] == "FAIL"
    assert "invalid design: n_heads (8) must be a multiple of n_kv_heads (3)" in invalid.fail_reason
    expected = {1: "crash: child killed by signal SIGKILL", 3: "OOM: ", 4: "NaN logits: "}
    for n, reason in expected.items():
        if n != invalid.number:  # an invalid design fails before its fault could fire
            assert by_n.loc[n, "state"] == "FAIL"
            assert by_n.loc[n, "fail_reason"].startswith(reason), by_n.loc[n, "fail_reason"]
    ok = df[df.state == "COMPLETE"]
    assert len(ok) == 5 - len({invalid.number, 1, 3, 4})
    assert (ok.decode_tok_s > 0).all() and (ok.fail_reason.fillna("") == "").all()
    # the table on disk is the same, and keeps the design of failed trials
    disk = pd.read_parquet(plan.results / "trials.parquet")
    assert list(disk["state"]) == list(df["state"])
    assert disk.loc[disk.number == 3, "n_kv_heads"].item() == by_n.loc[3, "n_kv_heads"]
    assert (plan.results / "pareto.png").stat().st_size > 0
    # a resumed study keeps them as results, and says how many and how to measure them again
    from sweep.storage import failed_designs

    assert failed_designs(study) == 4


def test_an_error_of_the_study_process_fails_the_design_and_the_study_goes_on(tmp_path):
    # a trial's folder that cannot be made (a file in its place: as a full disk or a permission
    # would) raised out of the study: the design lost with an empty reason, the rest not run
    from sweep.plan import plan_from_config
    from sweep.study import run
    from tests.helpers import compose_cfg

    plan = plan_from_config(compose_cfg(tiny_overrides(tmp_path, "+experiment=gqa_vs_mha",
                                                       "study.n_trials=3")))
    (plan.results / "trials").mkdir(parents=True)
    (plan.results / "trials" / "0001").write_text("in the way")
    study, df = run(plan)
    assert list(df["state"]) == ["COMPLETE", "FAIL", "COMPLETE"]
    assert df.loc[1, "fail_reason"].startswith("error in the study process: FileExistsError")
    assert "Traceback" in study.trials[1].user_attrs["traceback"]


def test_timeout_is_recorded(tmp_path):
    plan, study, df = run_tiny(tmp_path, "cpu.workload.timeout_s=8", "fault=measure:hang@0",
                           "study.n_trials=1")
    assert df.loc[0, "state"] == "FAIL"
    assert df.loc[0, "fail_reason"].startswith("timeout: trial exceeded 8 s")


def test_resume_keeps_finished_trials(tmp_path):
    over = ("+experiment=gqa_vs_mha",)
    _, study, df = run_tiny(tmp_path, *over, "study.n_trials=2")
    assert list(df["state"]) == ["COMPLETE", "COMPLETE"]
    first = {t.number: (t.datetime_start, t.values) for t in study.trials}
    _, study2, df2 = run_tiny(tmp_path, *over)  # the grid target: all 4 divisors of n_heads=8
    assert len(df2) == 4 and set(df2["state"]) == {"COMPLETE"}
    assert sorted(df2["n_kv_heads"]) == [1, 2, 4, 8]
    for t in study2.trials[:2]:
        assert (t.datetime_start, t.values) == first[t.number]
    # running the finished study again measures nothing new
    _, study3, df3 = run_tiny(tmp_path, *over)
    assert len(df3) == 4


def test_study_killed_mid_trial_resumes(tmp_path):
    """Kill the study process while trial 1 runs; the re-run marks it FAIL (interrupted), measures
    its design again and finishes the grid, keeping trial 0."""
    over = tiny_overrides(tmp_path, "+experiment=gqa_vs_mha")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *over, "fault=measure:hang@1"],
                            cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    storage = f"sqlite:///{tmp_path}/optuna.db"
    deadline = time.time() + 120
    name = None
    while time.time() < deadline:
        time.sleep(1)
        try:
            names = optuna.get_all_study_names(storage)
        except Exception:
            continue
        if names:
            name = names[0]
            trials = optuna.load_study(study_name=name, storage=storage).trials
            if len(trials) >= 2 and trials[1].state.name == "RUNNING":
                break
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("trial 1 never started")
    os.killpg(proc.pid, signal.SIGKILL)  # the study process and its hanging child
    proc.wait()
    # the same study (an injected fault is part of its identity); trial 1's fault does not fire
    # again: its design comes back as another trial
    _, study, df = run_tiny(tmp_path, "+experiment=gqa_vs_mha", "fault=measure:hang@1")
    states = df.set_index("number")["state"]
    assert states[0] == "COMPLETE"
    assert states[1] == "FAIL"
    assert df.set_index("number").loc[1, "fail_reason"].startswith("interrupted")
    done = df[df.state == "COMPLETE"]
    assert sorted(done["n_kv_heads"]) == [1, 2, 4, 8]  # trial 1's design was measured again


def test_a_sampler_never_measures_a_design_twice(tmp_path, capsys):
    """NSGA-II over a space of 3 designs, asked for 6: the study holds 3 designs, each measured
    once; a proposal of a design already run is answered from it (``duplicate_of``), measures
    nothing and does not count; the lines count designs, not trials."""
    from tests.helpers import run_tiny

    plan, study, df = run_tiny(tmp_path, "+experiment=attention_shape",
                               "experiment.space_cpu.n_heads.choices=[8]",
                               "experiment.space_cpu.head_dim.choices=[16]",
                               "study.n_trials=6", "quiet=false")
    done = df[df.state == "COMPLETE"]
    measured = done[done.get("duplicate_of").isna()] if "duplicate_of" in done else done
    assert sorted(measured.n_kv_heads) == [1, 2, 4]
    assert len(done) == 3  # one record per design: the sampler's repeats hold no row of NaNs
    assert (plan.results / "trials").exists() and len(list((plan.results / "trials").iterdir())) == 3
    out = capsys.readouterr().out
    assert "[3/3]" in out and "[4/" not in out
    timed = re.findall(r"\((\d+) s: ([^)]*other[^,)]* \d+ s)\)", out)  # the design's time, all named
    assert len(timed) == 3, out
    for total, parts in timed:  # the phases add up to the whole, within each figure's rounding
        assert abs(sum(int(p.split()[-2]) for p in parts.split(", ")) - int(total)) <= 2, parts


def test_the_cpu_fallback_of_two_real_models_is_two_studies(tmp_path):
    # the tiny measurement is the same, the designs priced beside it are not: two studies, each
    # named with the real model (the second had resumed the first's study and overwritten its
    # predicted tables and report)
    from sweep.plan import plan_from_config
    from tests.helpers import compose_cfg, tiny_overrides

    names = [plan_from_config(compose_cfg(tiny_overrides(tmp_path, f"model={m}"))).name
             for m in ("llama3_2_1b", "llama3_1_8b")]
    assert names[0] != names[1], names
    assert "llama3_2_1b" in names[0] and "llama3_1_8b" in names[1]
    again = plan_from_config(compose_cfg(tiny_overrides(tmp_path, "model=llama3_1_8b"))).name
    assert again == names[1]


def test_the_cpu_fallback_refuses_real_designs_past_their_context(tmp_path):
    # a design whose max_seq_len is under the workload's prompt: refused before any work, as a
    # predict-only study refuses it (the CPU fallback had priced it, COMPLETE, with no note)
    import pytest

    from sweep.plan import plan_from_config
    from tests.helpers import compose_cfg, tiny_overrides

    with pytest.raises(ValueError, match="max_seq_len 256.*the real designs the CPU fallback"):
        plan_from_config(compose_cfg(tiny_overrides(tmp_path, "model.max_seq_len=256",
                                                    "workload=long_context")))
