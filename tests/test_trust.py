"""Trust: every figure belongs to the design asked for. One test per class of fault or bad input:
overrides on the CPU fallback, stale resumes, Ctrl-C / SIGTERM and kill -9 (no design lost, no
process left), output clashes, concurrent runs, bad workloads, corrupted storage, CPU OOM,
noisy and impossible measurements. (Checkpoint round trips: tests/test_hf_parity.py.)"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from sweep.plan import plan_from_config
from tests.conftest import project_processes
from tests.helpers import compose_cfg, run_tiny, sweep_cli, tiny_overrides

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(REPO))
pytestmark = pytest.mark.slow


# ---- no silent overrides -----------------------------------------------------------------

@pytest.mark.parametrize("override,message", [
    ("model.n_kv_heads=5", "n_heads (32) must be a multiple of n_kv_heads (5)"),
    ("model.n_heads=abc", "n_heads must be a positive integer, got 'abc'"),
    ("workload.batch=0", "workload.batch=0 must be an integer >= 1"),
    ("+model.foo=1", "unknown ModelConfig field(s): foo"),
    ("model.dtype=fp8", "dtype='fp8' is not one of"),
    # Hydra's composition errors: the same exit code and one line, not Hydra's exit 1 (the
    # other kinds in-process: test_hydra_composition_errors_are_one_line_and_exit_2)
    ("hardware=nosuch", "Could not find 'hardware/nosuch'"),
])
def test_cpu_fallback_refuses_bad_overrides_by_name(tmp_path, override, message):
    r = sweep_cli(tmp_path, override)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr and not list(tmp_path.glob("*/trials"))  # before any work


@pytest.mark.parametrize("override,message", [
    ("+experiment=nosuch", "Could not find 'experiment/nosuch'"),
    ("workload.batch=abc", "could not be converted to Integer"),
    ("model.nosuch=1", "model.nosuch: model has no field 'nosuch'"),
    # a misspelled field: the nearest one named, not Hydra's advice to append it with "+"
    ("model.n_kv_head=3", "model has no field 'n_kv_head' (did you mean model.n_kv_heads?)"),
    ("workload.batchh=2", "(did you mean workload.batch?)"),
    ("model.hf_config=config.json", "+model.hf_config=PATH"),  # added, as the README says
    # a misspelled config group or setting: Hydra advised "+hardwre=h200", which fails too
    ("hardwre=h200", "hardwre: no config group or setting of that name (did you mean hardware?)"),
    ("studdy.n_trials=3", "no config group or setting 'studdy' (did you mean study?)"),
])
def test_hydra_composition_errors_are_one_line_and_exit_2(override, message, capsys):
    from sweep.__main__ import refuse_bad_overrides

    with pytest.raises(SystemExit) as e:
        refuse_bad_overrides([override])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and message in err, err
    refuse_bad_overrides(["model.n_kv_heads=4", "--cfg", "job"])  # flags: left to Hydra


def test_an_unknown_option_is_one_line_with_the_options(capsys):
    from sweep.config.overrides import refuse_bad_overrides

    with pytest.raises(SystemExit):
        refuse_bad_overrides(["hardware=nosuch"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Config search path" not in err
    assert ("Could not find 'hardware/nosuch' (options of hardware: a100_80gb, a100_80gb_pcie, "
            "auto,") in err


def test_a_field_its_preset_does_not_list_is_set_and_a_space_entry_is_replaced_by_name(capsys):
    """``model.n_experts=4`` on a dense preset (its file lists what its config.json says) sets the
    field, as the README's MoE and attention-kind overrides do; a misspelled one is still named;
    a dict value that Hydra would merge into a space entry of another shape says how to replace
    it, in place of "no field" for a key that is there."""
    from sweep.config.overrides import refuse_bad_overrides, with_model_fields

    argv = with_model_fields(["model.n_experts=4", "model.qk_norm=head", "model.n_kv_head=3",
                              "+model.n_experts_active=2", "workload.batch=2"])
    assert argv == ["++model.n_experts=4", "++model.qk_norm=head", "model.n_kv_head=3",
                    "+model.n_experts_active=2", "workload.batch=2"]
    refuse_bad_overrides(argv[:2])  # composes
    with pytest.raises(SystemExit) as e:
        refuse_bad_overrides(["+experiment=gqa_vs_mha",
                              "experiment.space.n_kv_heads={choices:[1,2]}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "has no field" not in err
    assert "'~experiment.space.n_kv_heads' '+experiment.space.n_kv_heads={choices:[1,2]}'" in err


def test_cpu_fallback_applies_overrides(tmp_path):
    plan = plan_from_config(compose_cfg(tiny_overrides(tmp_path, "model.n_kv_heads=4",
                                                       "model.ffn_dim=256", "workload.batch=3")))
    assert plan.base.name == "tiny"
    assert (plan.base.n_kv_heads, plan.base.ffn_dim, plan.workload["batch"]) == (4, 256, 3)
    # an override valid on the configured model but not on the fallback is refused, saying why
    from zoo import DesignError

    with pytest.raises(DesignError, match="n_kv_heads .16. must not exceed n_heads .8.*CPU fallback"):
        plan_from_config(compose_cfg(tiny_overrides(tmp_path, "model.n_kv_heads=16")))
    # a workload the fallback's tiny model cannot hold names the fallback too (its 256 positions)
    with pytest.raises(ValueError, match="max_seq_len 256 .the CPU fallback's 'tiny' model"):
        plan_from_config(compose_cfg(tiny_overrides(tmp_path, "workload.prompt_len=100000")))


def test_cpu_fallback_carries_a_mixture_of_experts(tmp_path):
    """A mixture of experts on the CPU fallback is measured as one: the tiny model with at most
    8 experts of width 32, top 2, the design's QK-norm and router (a newcomer's ``model=olmoe_1b_7b
    workload.routing=uniform`` of 2026-11-28 measured a dense tiny model while its row said
    ``routing=uniform``); the user's overrides over them; a dense design carries none."""
    b = plan_from_config(compose_cfg(tiny_overrides(tmp_path, "model=olmoe_1b_7b"))).base
    assert (b.name, b.n_experts, b.n_experts_active, b.expert_ffn_dim, b.qk_norm,
            b.router_renorm) == ("tiny", 8, 2, 32, "full", False)
    b = plan_from_config(compose_cfg(tiny_overrides(
        tmp_path, "model=olmoe_1b_7b", "model.n_experts=4", "model.n_experts_active=4"))).base
    assert (b.n_experts, b.n_experts_active, b.expert_ffn_dim) == (4, 4, 32)
    b = plan_from_config(compose_cfg(tiny_overrides(tmp_path, "model=llama3_2_1b"))).base
    assert (b.name, b.n_experts, b.qk_norm) == ("tiny", 0, "none")


def test_cpu_fallback_keeps_an_override_equal_to_the_group_file(tmp_path):
    """``workload.batch=1`` is the default workload's batch, and the user's: the CPU fallback
    measures batch 1, not its own workload's 2 (Hydra's record of the command line names it; a
    newcomer's run of 2026-11-28 measured batch 2 while the GPU prices said batch 1). Without
    that record (the compose API) only the values that differ from the group file carry over."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from sweep.config.schema import register
    from tests.helpers import CONF

    over = tiny_overrides(tmp_path, "workload.batch=1", "model.n_heads=8")
    assert plan_from_config(compose_cfg(over)).workload["batch"] == 2  # no record: the group's
    register()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        cfg = compose(config_name="config", overrides=over, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # as hydra.main sets it, the app's config without
    with open_dict(cfg):  # its hydra node
        del cfg["hydra"]
    try:
        plan = plan_from_config(cfg)
    finally:
        HydraConfig.instance().cfg = None
    assert plan.workload["batch"] == 1 and plan.base.n_heads == 8


# ---- bad workloads refused up front ---------------------------------------------------------

@pytest.mark.parametrize("override,message", [
    ("cpu.workload.new_tokens=0", "workload.new_tokens=0 must be an integer >= 1"),
    ("cpu.workload.prompt_len=-4", "workload.prompt_len=-4 must be an integer >= 1"),
    ("cpu.workload.prompt_len=253", "prompt_len + workload.new_tokens = 257 exceeds the design's "
                                    "max_seq_len 256"),
    ("study.n_trials=0", "study.n_trials=0 must be at least 1"),
    ("cpu.workload.routing_skew=-1", "workload.routing_skew=-1"),
    ("study.directions=[maximize]", "study.directions must give maximize or minimize for each"),
    ("weights=/no/such/checkpoint", "weights=/no/such/checkpoint: no such file"),
])
def test_bad_workloads_refused_before_any_trial(tmp_path, override, message):
    with pytest.raises(ValueError) as e:
        plan_from_config(compose_cfg(tiny_overrides(tmp_path, override)))
    assert message in str(e.value)


def test_a_design_that_cannot_end_within_its_timeout_is_refused_at_its_roofline():
    """``analysis.memory.check_time``: the roofline of ``warmup + repeats`` runs against
    ``workload.timeout_s``, from the measured ceilings: an 8B design's decode loops at 20 GB/s
    need at least 13 x 127 x ~0.8 s; the tiny design passes; no copy rate, no refusal."""
    from sweep.analysis.memory import check_time
    from zoo import DesignError, ModelConfig

    big, tiny = ModelConfig.from_name("llama3_1_8b"), ModelConfig.from_name("tiny")
    wl = dict(batch=1, prompt_len=512, new_tokens=128, warmup=3, repeats=10, timeout_s=900.0)
    ceil = {"copy_bytes_s": 20e9}
    with pytest.raises(DesignError, match=r"at least \d+ s at its roofline .*workload.timeout_s=900"):
        check_time(big, wl, ceil)
    check_time(big, dict(wl, repeats=1, warmup=0, new_tokens=16), ceil)  # ~13 s: runs
    check_time(tiny, wl, ceil)
    check_time(big, wl, {})  # nothing measured: nothing refused
    # the compute term where the dtype's GEMM rate was measured: a 1 TFLOP/s chip's prefills
    with pytest.raises(DesignError, match="TFLOP/s"):
        check_time(big, dict(wl, batch=64, new_tokens=2), dict(ceil, gemm_flops_bf16=1e12))


def test_weights_must_be_safetensors(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a safetensors checkpoint"):
        plan_from_config(compose_cfg(tiny_overrides(tmp_path, f"weights={tmp_path}/model.bin")))


def test_a_damaged_checkpoint_is_refused_before_any_trial(tmp_path):
    """Each safetensors header is read up front: an empty file, or an index naming a shard that
    is not there, is refused naming the file (an empty model.safetensors failed only inside the
    trial, as a SafetensorError, and the FAIL was then kept on resume)."""
    import torch
    from safetensors.torch import save_file

    empty, sharded = tmp_path / "empty", tmp_path / "sharded"
    empty.mkdir()
    (empty / "model.safetensors").write_bytes(b"")
    sharded.mkdir()
    save_file({"norm.weight": torch.ones(4)}, str(sharded / "a.safetensors"))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"norm.weight": "a.safetensors", "lm_head.weight": "b.safetensors"}}))
    for ckpt, message in [(empty, "model.safetensors is not a readable safetensors file"),
                          (sharded, "b.safetensors is not a readable safetensors file")]:
        with pytest.raises(ValueError, match=message):
            plan_from_config(compose_cfg(tiny_overrides(tmp_path, f"weights={ckpt}")))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"norm.weight": "a.safetensors"}}))
    plan_from_config(compose_cfg(tiny_overrides(tmp_path, f"weights={sharded}")))  # readable


# ---- no stale resumes, no overwritten outputs -----------------------------------------------

def test_changed_command_never_resumes_an_old_study(tmp_path):
    base = ("+experiment=gqa_vs_mha", "study.n_trials=1")
    p1, _, df1 = run_tiny(tmp_path, *base)
    p2, _, df2 = run_tiny(tmp_path, *base, "model.ffn_dim=256")
    assert p1.name != p2.name and p1.results != p2.results  # the default name has the identity
    assert list(df2.ffn_dim) == [256] and list(df1.ffn_dim) == [352]
    with pytest.raises(RuntimeError, match="was run with another base_model"):
        run_tiny(tmp_path, *base, f"study.name={p1.name}", "model.ffn_dim=256")
    with pytest.raises(RuntimeError, match="another seed"):
        run_tiny(tmp_path, *base, f"study.name={p1.name}", "seed=3")
    _, _, again = run_tiny(tmp_path, *base, f"study.name={p1.name}")  # the same identity resumes
    assert len(again) == 1


def test_outputs_belong_to_one_study_in_one_storage(tmp_path):
    run_tiny(tmp_path, "study.n_trials=1", "study.name=same")
    with pytest.raises(RuntimeError, match="outputs are never overwritten"):
        run_tiny(tmp_path, "study.n_trials=1", "study.name=same",
                 f"study.storage={tmp_path}/other/optuna.journal")
    # refused before the study was created: no empty study left in the other storage
    assert not (tmp_path / "other" / "optuna.journal").exists()


# ---- concurrent runs never measure a design twice ----------------------------------------------

def test_two_runs_at_once_measure_each_design_once(tmp_path):
    over = tiny_overrides(tmp_path, "+experiment=gqa_vs_mha", "study.name=both")
    procs = [subprocess.Popen([sys.executable, "-m", "sweep", *over], cwd=REPO, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    study = optuna.load_study(study_name="both", storage=f"sqlite:///{tmp_path}/optuna.db")
    measured = [t.params["n_kv_heads"] for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(measured) == [1, 2, 4, 8], outs  # every design once, none twice


# ---- interrupts: no design lost, no process left --------------------------------------------

def _start_hanging_study(tmp_path, *extra, **popen):
    over = tiny_overrides(tmp_path, "+experiment=gqa_vs_mha", "study.name=hang", *extra)
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *over, "fault=measure:hang@1"],
                            cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)
    storage = f"sqlite:///{tmp_path}/optuna.db"
    deadline = time.time() + 300  # two workers on a loaded 2-core machine: > 120 s seen
    while time.time() < deadline:
        time.sleep(0.5)
        try:
            trials = optuna.load_study(study_name="hang", storage=storage).trials
        except Exception:  # noqa: BLE001 - not created yet
            continue
        if (len(trials) >= 2 and trials[1].state.name == "RUNNING"
                and any("/trials/0001/" in cmd for _, cmd in project_processes(str(tmp_path)))):
            return proc, storage  # trial 1's own child is running
    proc.kill()
    pytest.fail("trial 1 never started")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_requeues_the_running_design(tmp_path, sig):
    proc, storage = _start_hanging_study(tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err  # 130 after Ctrl-C, 143 after SIGTERM
    assert err.strip().splitlines()[-1].startswith("interrupted") and "Traceback" not in err
    assert not project_processes(str(tmp_path))  # the trial child died with the trial
    trials = optuna.load_study(study_name="hang", storage=storage).trials
    assert trials[1].state.name == "FAIL" and trials[1].user_attrs["interrupted"]
    assert trials[1].user_attrs["fail_reason"].startswith("interrupted")
    waiting = [t for t in trials if t.state.name == "WAITING"]
    assert [t.system_attrs["fixed_params"] for t in waiting] == [trials[1].params]
    said = json.loads(trials[1].user_attrs["row"])  # the trial's row, one JSON attribute
    assert said["n_kv_heads"] == trials[1].params["n_kv_heads"]  # its design said
    _, study, df = run_tiny(tmp_path, "+experiment=gqa_vs_mha", "study.name=hang",
                            "fault=measure:hang@1")  # the same study (its fault fires on trial 1 only)
    assert sorted(df[df.state == "COMPLETE"].n_kv_heads) == [1, 2, 4, 8]  # nothing lost
    cut = df[df.fail_reason.astype(str).str.startswith("interrupted")]
    assert len(cut) == 1 and cut.n_kv_heads.notna().all() and cut.d_model.notna().all()
    # the report counts designs, the cut-off trial apart (it read "5 designs (4 complete, 1 fail)")
    page = (tmp_path / "hang" / "report.html").read_text()
    assert "4 designs (4 complete); 1 trial(s) interrupted, their designs queued again" in page


def test_a_reader_that_goes_away_stops_the_study_as_an_interrupt(tmp_path):
    """``python -m sweep ... | head -1``: the first write after the reader closed its end stops
    the study as Ctrl-C does: exit 141 (128 + SIGPIPE, as a shell reports a pipe's writer), one
    line on stderr and no traceback, no trial left RUNNING, no process left."""
    over = [a for a in tiny_overrides(tmp_path, "+experiment=gqa_vs_mha", "study.name=pipe")
            if a != "quiet=true"]
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *over], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141
    err = proc.stderr.read()
    assert "interrupted (stdout closed)" in err and "Traceback" not in err, err
    trials = optuna.load_study(study_name="pipe", storage=f"sqlite:///{tmp_path}/optuna.db").trials
    assert not [t for t in trials if t.state.name == "RUNNING"]
    assert not project_processes(str(tmp_path))


def test_a_reader_gone_mid_study_keeps_every_design_it_measured(tmp_path):
    """The reader closes after the first design's line: the study ends at the next trial
    boundary (exit 141), every design it measured COMPLETE, none failed as interrupted."""
    over = [a for a in tiny_overrides(tmp_path, "+experiment=gqa_vs_mha", "study.name=pipe2")
            if a != "quiet=true"]
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *over], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not proc.stdout.readline().startswith("[1/"):
        pass
    proc.stdout.close()
    assert proc.wait(timeout=180) == 141
    trials = optuna.load_study(study_name="pipe2", storage=f"sqlite:///{tmp_path}/optuna.db").trials
    assert [t.state.name for t in trials if t.state.name != "WAITING"].count("COMPLETE") >= 1
    assert not [t for t in trials if t.user_attrs.get("interrupted")], proc.stderr.read()


def test_interrupt_of_a_study_with_workers(tmp_path):
    """SIGTERM to a two-worker study: the parent stops its workers (each started by
    ``sweep.measure.child.start``), each records and re-queues the design it was measuring, no
    process is left, and a resume measures every design."""
    proc, storage = _start_hanging_study(tmp_path, "sweep.workers=2")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    deadline = time.time() + 10
    while project_processes(str(tmp_path)) and time.time() < deadline:
        time.sleep(0.2)
    assert not project_processes(str(tmp_path))
    trials = optuna.load_study(study_name="hang", storage=storage).trials
    cut = [t for t in trials if t.user_attrs.get("interrupted")]
    assert trials[1] in cut and all(t.state.name == "FAIL" for t in cut)
    waiting = [t.system_attrs["fixed_params"] for t in trials if t.state.name == "WAITING"]
    # a trial's design: its queued params (a worker stopped inside Optuna's ask has sampled none)
    assert all(t.system_attrs.get("fixed_params", t.params) in waiting for t in cut), (
        [(t.number, t.state.name, t.params, t.user_attrs.get("fail_reason")) for t in trials],
        out[-2000:], err[-2000:])
    _, study, df = run_tiny(tmp_path, "+experiment=gqa_vs_mha", "study.name=hang",
                            "fault=measure:hang@1")  # the same study (its fault fires on trial 1 only)
    assert sorted(df[df.state == "COMPLETE"].n_kv_heads) == [1, 2, 4, 8]  # nothing lost


def test_kill_9_of_the_study_leaves_no_trial_running(tmp_path):
    proc, _ = _start_hanging_study(tmp_path)
    proc.send_signal(signal.SIGKILL)  # the study process only, not its group
    proc.communicate(timeout=30)
    deadline = time.time() + 10
    while project_processes(str(tmp_path)) and time.time() < deadline:
        time.sleep(0.2)
    assert not project_processes(str(tmp_path))


# ---- clear errors, flagged measurements -----------------------------------------------------

def test_corrupted_storage_is_one_line(tmp_path):
    run_tiny(tmp_path, "study.n_trials=1", "study.name=c")
    db = tmp_path / "optuna.db"
    with open(db, "r+b") as f:
        f.seek(4096 * 2)
        f.write(b"\xde\xad" * 4096)
    r = sweep_cli(tmp_path, "study.n_trials=2", "study.name=c")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "optuna.db" in r.stderr and "damaged" in r.stderr


def test_a_damaged_workers_journal_is_one_line(tmp_path):
    # the workers' journal storage (sweep.workers=2): a line that is no JSON had ended the
    # study with Hydra's traceback of a JSONDecodeError
    (tmp_path / "optuna.journal").write_text('{"garbage\n')
    r = sweep_cli(tmp_path, "study.n_trials=2", "study.name=j", "sweep.workers=2",
                  f"study.storage={tmp_path}/optuna.journal")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "optuna.journal" in last and "damaged" in last


def test_host_oom_is_recorded_as_oom(tmp_path):
    _, _, df = run_tiny(tmp_path, "study.n_trials=1", "fault=measure:hostoom")
    assert df.loc[0, "state"] == "FAIL" and df.loc[0, "fail_reason"].startswith("OOM: ")


def test_noisy_and_impossible_figures_are_flagged():
    from sweep.analysis.derived import noisy_stages, physical_limit_errors

    assert noisy_stages({"ttft_ms_min": 1.0, "ttft_ms_p90": 1.1, "decode_tpot_ms_min": 0.57,
                         "decode_tpot_ms_p90": 16.4}) == ["decode"]
    ok = {"prefill_tok_s": 10.0, "decode_tok_s": 5.0, "decode_mbu_vs_measured": 0.8,
          "prefill_mbu_vs_measured": 0.1, "decode_below_floor": False}
    assert physical_limit_errors(ok) == []
    bad = dict(ok, decode_tok_s=0.0, decode_mbu_vs_measured=3.1, decode_below_floor=True,
               decode_tpot_ms=0.1, decode_roofline_floor_ms=0.3)
    errs = "; ".join(physical_limit_errors(bad))
    assert "decode_tok_s = 0.0" in errs and "MBU 3.10 > 1" in errs and "below its roofline" in errs
    # a stage that only reads may pass the copy rate, never the datasheet's bandwidth
    read = dict(ok, prefill_mbu_vs_measured=1.08, prefill_mbu_vs_datasheet=0.95)
    assert physical_limit_errors(read) == []
    errs = "; ".join(physical_limit_errors(dict(read, prefill_mbu_vs_datasheet=1.1)))
    assert "prefill MBU 1.10 > 1 against the datasheet" in errs
    # a wrong spec (an SXM's datasheet on a PCIe card) does not hide a reading past the copy rate
    errs = "; ".join(physical_limit_errors(dict(read, prefill_mbu_vs_measured=1.5)))
    assert "prefill MBU 1.50 > 1.25 against the measured copy ceiling" in errs


def test_a_contended_design_is_marked_on_its_console_line(tmp_path, monkeypatch, capsys):
    """A design measured while other work kept the cores busy says so on its line, as a noisy
    one does (the row's ``contended`` alone went unseen on the console)."""
    from sweep.measure import contention

    monkeypatch.setattr(contention, "cpu_busy_cores", lambda window_s=0.3: 2.0)
    _, _, df = run_tiny(tmp_path, "study.n_trials=1", "quiet=false")
    assert bool(df.loc[0, "contended"])
    assert "CONTENDED (" in capsys.readouterr().out


def test_a_job_inside_a_measurement_is_seen_and_the_trials_own_work_is_not(tmp_path):
    """The two samples around a trial missed a job that started and ended inside it (a tiny
    design measured 17x slow went unflagged): on the CPU ``contention.during`` accounts for the
    whole block, less the CPU time of this process and its descendants (the trial's child)."""
    from sweep.measure import contention

    if contention.mark({"type": "cpu"}) is None:
        pytest.skip("no /proc here")
    hz = os.sysconf("SC_CLK_TCK")
    burn = tmp_path / "burn.py"
    burn.write_text("import time\nt = time.time()\n"  # 1.5 s of CPU (10 s of wall at most)
                    "while time.process_time() < 1.5 and time.time() - t < 10:\n    pass\n")
    own0 = contention._own_ticks()  # a child of ours (as a trial's is): our own time
    subprocess.run([sys.executable, str(burn)], check=True)
    assert (contention._own_ticks() - own0) / hz >= 1.2
    own0 = contention._own_ticks()  # an orphan (not our descendant): another job's time
    start = contention.mark({"type": "cpu"})
    orphan = burn.with_name("orphan.py")  # (ends by itself within 3 s, busy or not)
    orphan.write_text(burn.read_text().replace("< 10", "< 3"))
    subprocess.run(["sh", "-c", f"'{sys.executable}' '{orphan}' >/dev/null 2>&1 &"], check=True)
    time.sleep(1.9)
    assert (contention._own_ticks() - own0) / hz < 0.5
    assert "cores busy with other processes (mean over" in contention.during(start)
    assert contention.during(None) == "" and contention.mark({"type": "cuda"}) is None


def test_every_row_carries_its_spread_and_noise_flag(tmp_path):
    _, _, df = run_tiny(tmp_path, "study.n_trials=1")
    row = df.iloc[0]
    for col in ("ttft_ms_min", "ttft_ms_p90", "decode_tpot_ms_min", "decode_tpot_ms_p90",
                "noisy", "remeasured", "decode_linear"):
        assert col in df.columns
    assert row.decode_tpot_ms_min <= row.decode_tpot_ms <= row.decode_tpot_ms_p90
    assert row.decode_linear == "torch GEMMs (kernels=torch)"  # the CPU's path


def test_decode_linear_path_names_each_layer_or_why_not(monkeypatch):
    """The row's ``decode_linear``: per layer what ``kernels.decode_linear`` chose (cuBLAS or the
    Triton GEMV), or the path taken instead and why."""
    from kernels import decode_linear
    from sweep.measure.trial import decode_linear_path
    from zoo import ModelConfig, Transformer

    cfg = ModelConfig.from_name("tiny").replace(kernels="triton")
    model = Transformer(cfg)
    d, q, kv, f = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim
    dt = str(model.layers[0].attention.wqkv.weight.dtype).removeprefix("torch.")
    monkeypatch.setattr(decode_linear, "_CHOICE", {
        (2, q + 2 * kv, d, "norm+res", dt, "cpu"): "triton",
        (2, d, q, "none", dt, "cpu"): "cublas",
        (2, d, q, "swiglu", dt, "cpu"): "triton",  # another prologue: not out_proj's
        (2, d, f, "swiglu", "float16", "cpu"): "cublas",  # another dtype: not w2's
        (2, 2 * f, d, "norm+res+bias", dt, "cpu"): "triton"})
    got = decode_linear_path(model, 2, "cudagraph")
    assert got == ("qkv triton, out_proj cublas, w13 triton, w2 triton (not timed), "
                   "lm_head triton (not timed)")
    assert decode_linear_path(model, 32, "cudagraph").startswith("cuBLAS GEMMs (batch 32 > 16")
    # torch.compile traces the same GEMV path: the kernels are custom ops (kernels.ops)
    assert decode_linear_path(model, 2, "compile") == got
    ln = Transformer(cfg.replace(norm="layernorm"))
    assert "norm=layernorm" in decode_linear_path(ln, 2, "cudagraph")
    assert decode_linear_path(Transformer(cfg.replace(kernels="torch")), 2, "eager") == (
        "torch GEMMs (kernels=torch)")


def test_every_kernel_switch_is_config_in_the_row_and_the_identity(tmp_path):
    """Each switch of ``kernels.switches`` is a typed config field: set on the command line it
    changes the study's identity (a new default name), lands in every row (``switch_<name>``),
    and a resume of the study under another value is refused; a bad value is refused by name."""
    from kernels.switches import Switches, names
    from sweep.plan import plan_from_config

    base = ("+experiment=gqa_vs_mha", "study.n_trials=1")
    default = plan_from_config(compose_cfg(tiny_overrides(tmp_path, *base)))
    assert default.identity["switches"] == Switches().to_dict()
    seen = {default.name}
    for n in names():
        flipped = not getattr(Switches(), n)
        p = plan_from_config(compose_cfg(tiny_overrides(tmp_path, *base,
                                                        f"switches.{n}={str(flipped).lower()}")))
        assert getattr(p.switches, n) is flipped and p.name not in seen, n
        seen.add(p.name)
    p1, _, df = run_tiny(tmp_path, *base, "switches.rope_in_attention=false")
    assert df.switch_rope_in_attention.eq(False).all() and df.switch_pdl.eq(True).all()
    with pytest.raises(RuntimeError, match="another switches"):
        run_tiny(tmp_path, *base, f"study.name={p1.name}")  # the defaults: another value
    with pytest.raises(Exception, match="pdl"):
        plan_from_config(compose_cfg(tiny_overrides(tmp_path, *base, "switches.pdl=maybe")))


def test_the_users_nvtx_setting_does_not_reach_a_trial(monkeypatch):
    """``DESIGNZOO_NVTX`` carries the parent's ``profile.nvtx`` to its child only: set in the
    user's shell it would push NVTX ranges inside an eager decode (host time) that no row says."""
    from sweep.measure.child import child_env

    monkeypatch.setenv("DESIGNZOO_NVTX", "1")
    monkeypatch.setenv("SOME_OTHER", "kept")
    env = child_env()
    assert "DESIGNZOO_NVTX" not in env and env["SOME_OTHER"] == "kept"
    assert env["DESIGNZOO_PARENT_PID"] == str(os.getpid())


def test_triton_interpreter_is_in_the_row_the_identity_and_the_fingerprints(tmp_path,
                                                                            monkeypatch):
    """Triton's interpreter changes figures (no autotuning, no PDL, float32): a row says whether
    it ran, a study's identity and the calibration's fingerprints carry it when set, and leave
    both as they were when not (the shipped calibrations' fingerprints keep matching)."""
    from kernels.switches import Switches
    from sweep.analysis.fingerprints import fingerprints
    from sweep.common.env import detect_device, environment

    dev = detect_device("cpu")
    base = ("+experiment=gqa_vs_mha", "study.n_trials=1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    plain = plan_from_config(compose_cfg(tiny_overrides(tmp_path, *base, "model.kernels=torch")))
    fp = fingerprints(dev, Switches())
    assert environment(dev)["triton_interpret"] is False
    assert "triton_interpret" not in plain.identity
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    interp = plan_from_config(compose_cfg(tiny_overrides(tmp_path, *base, "model.kernels=torch")))
    assert environment(dev)["triton_interpret"] is True
    assert interp.identity["triton_interpret"] is True and interp.name != plain.name
    fi = fingerprints(dev, Switches())
    assert set(fi) == set(fp) and all(fi[k] != fp[k] for k in fp)


def test_command_lines_refuse_bad_options_before_any_work(tmp_path, capsys):
    """Each command's bad option ends in one ``error:`` line and exit code 2 (``entry``), never
    a traceback, a silent fallback or a wrong answer: an unknown spec for ``validate`` (before its
    output folder exists), a named calibration file that is missing or not a calibration (advise,
    whatif, validate and a study), a negative regression threshold, an advisor band outside
    [0, 1), ``--top 0`` or a target that is not a GPU, a calibration timeout that is not positive."""
    from sweep.cli.advise import main as advise
    from sweep.cli.calibrate import main as calibrate
    from sweep.cli.validate import main as validate
    from sweep.common.entry import entry
    from sweep.report.other_hardware import main as whatif
    from sweep.report.regression import main as compare

    bad = tmp_path / "bad.json"
    bad.write_text("{bad")
    bad.with_suffix(".parquet").write_bytes(b"")
    missing = tmp_path / "nosuch.json"
    out = tmp_path / "out"
    cases = [
        (lambda: validate(["--set", "heldout_cpu", "--hardware", "nosuch", "--out", str(out)]),
         "unknown hardware spec 'nosuch'"),
        (lambda: validate(["--set", "heldout_cpu", "--calibration", str(missing), "--out",
                           str(out)]), "nosuch.json: no calibration here"),
        (lambda: advise(["hardware=h100_sxm", f"--calibration={missing}", f"--out={out}"]),
         "nosuch.json: no calibration here"),
        (lambda: advise(["hardware=h100_sxm", f"--calibration={bad}", f"--out={out}"]),
         "not a calibration's .json"),
        (lambda: advise(["hardware=h100_sxm", "--band", "-1", f"--out={out}"]), "band=-1.0"),
        (lambda: advise(["hardware=h100_sxm", "--top", "0", f"--out={out}"]), "top=0"),
        # an NPU's spec has no bf16 tensor-core peak: its advice read "TPOT nan ms", exit 0
        (lambda: advise(["hardware=snapdragon_x_elite_npu", f"--out={out}"]),
         "hardware=snapdragon_x_elite_npu is not a GPU (kind npu)"),
        # a spec that states no peaks (it had pointed at a predict-only study there, which
        # cannot price one either)
        (lambda: advise(["hardware=cpu", f"--out={out}"]),
         "hardware=cpu: a predict-only study prices designs from the spec's stated peaks"),
        (lambda: whatif([str(tmp_path), "--hardware", "h100_sxm", "--calibration", str(missing)]),
         "no calibration here"),
        (lambda: compare([str(tmp_path), str(tmp_path), "--threshold", "-1"]), "--threshold=-1"),
        (lambda: calibrate(["--timeout", "0"]), "--timeout=0.0"),
    ]
    for run, message in cases:
        assert entry(run) == 2, message
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "Traceback" not in err, err
    assert not out.exists()  # refused before any work
    with pytest.raises(ValueError, match="calibration=.*nosuch.json: .*no calibration here"):
        plan_from_config(compose_cfg(tiny_overrides(tmp_path, f"calibration={missing}")))


def test_advise_without_the_designs_entries_prices_the_roofline_and_says_why():
    """A calibration that cannot price the design (here: no GEMM of its dtype) is not a crash:
    the advisor falls back to the roofline and its basis says why."""
    from sweep.analysis import calibration_store as store
    from sweep.analysis.advice import advise
    from sweep.analysis.hardware import load_spec
    from sweep.analysis.pricing import Calibrated
    from zoo import ModelConfig

    have = store.shipped("NVIDIA H100 80GB HBM3")
    c = Calibrated(have.with_(table=have.table[have.table.kind != "gemm"]))
    cfg = ModelConfig.from_name("llama3_2_1b").resolved("cuda")
    r = advise(cfg, dict(batch=1, prompt_len=512, new_tokens=64), load_spec("h100_sxm"), c)
    assert r["basis"].startswith("roofline") and "no bf16 GEMM in the calibration" in r["basis"]
    assert r["predicted"]["decode_pred_ms"] > 0


def test_every_command_answers_help_without_doing_its_work(capsys, monkeypatch):
    """``--help`` of each command only prints its usage: the installer's too (it once had no
    options parser, so ``--help`` ran a real install into the environment)."""
    from sweep.cli import calibrate, install, validate
    from sweep.cli import whatif as whatif_cli
    from sweep.cli.advise import main as advise
    from sweep.report.regression import main as compare

    monkeypatch.setattr(install, "pip", lambda *a: pytest.fail(f"--help ran pip {a}"))
    for main in (install.main, calibrate.main, validate.main, advise, whatif_cli.main, compare):
        with pytest.raises(SystemExit) as e:
            main(["--help"])
        out = capsys.readouterr().out
        assert e.value.code == 0 and out.startswith("usage:"), (main.__module__, out)


def test_a_worker_that_does_not_stop_is_killed_in_bounded_time(tmp_path):
    """``stop_workers``: workers still running ``wait_s`` after their SIGTERM (ones that ignore
    it) are killed with their groups, ``wait_s`` in all, not each (two deaf workers had made a
    stopped study outlast its caller's minute), so an interrupted study with workers always
    ends, no process left; a worker that stops is only waited for."""
    from sweep.measure.child import start
    from sweep.worker import stop_workers

    deaf = [start([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                   "signal.SIG_IGN); print('up', flush=True); time.sleep(120)"],
                  tmp_path / f"deaf{i}.log") for i in range(2)]
    polite = start([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"],
                   tmp_path / "b.log")
    deadline = time.time() + 30
    while not all(p.exists() and "up" in p.read_text() for p in (tmp_path / "deaf0.log",
                                                                  tmp_path / "deaf1.log",
                                                                  tmp_path / "b.log")):
        assert time.time() < deadline
        time.sleep(0.1)
    t0 = time.time()
    stop_workers([*deaf, polite], wait_s=4)
    assert time.time() - t0 < 7  # one wait_s and the kills, not two
    assert all(c.poll() is not None for c in [*deaf, polite])


def test_a_record_restores_without_writing_over_a_study_and_keeps_predict(tmp_path, capsys):
    """``record --restore`` wrote over a live study's files (exit 0), and a restored predict-only
    study lost ``predict``: its report showed the predictions as measured. A study named twice
    in one record was recorded twice."""
    from sweep.report.records import main

    plan, _, _ = run_tiny(tmp_path, "study.predict=true", "hardware=h100_sxm",
                          "study.n_trials=1")
    rec = tmp_path / "rec.json"
    with pytest.raises(SystemExit):  # argparse's refusal, exit 2
        main([str(rec), str(plan.results), str(plan.results), "--command", "x"])
    assert "named twice" in capsys.readouterr().err and not rec.exists()
    assert main([str(rec), str(plan.results), "--command", "x"]) == 0
    out = tmp_path / "restored"
    assert main(["--restore", str(rec), str(out)]) == 0
    meta = json.loads((out / plan.name / "study.json").read_text())
    assert meta["predict"] is True
    before = (plan.results / "study.json").read_text()
    assert main(["--restore", str(rec), str(plan.results.parent)]) == 2  # the live study's folder
    assert "holds a study already" in capsys.readouterr().err
    assert (plan.results / "study.json").read_text() == before
    twin = tmp_path / "twin" / plan.results.name  # the same study in another folder
    shutil.copytree(plan.results, twin)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "rec2.json"), str(plan.results), str(twin), "--command", "x"])
    assert "two of one study name" in capsys.readouterr().err
    both = json.loads(rec.read_text())
    both["studies"] *= 2
    (tmp_path / "rec3.json").write_text(json.dumps(both))
    assert main(["--restore", str(tmp_path / "rec3.json"), str(tmp_path / "r3")]) == 2
    assert "two studies named" in capsys.readouterr().err and not (tmp_path / "r3").exists()


def test_a_study_json_that_is_not_a_studys_is_refused_by_name(tmp_path):
    # valid JSON but not a study's ({} or []): KeyError / AttributeError tracebacks in every tool
    from sweep.report.tables import load_study

    plan, _, _ = run_tiny(tmp_path, "study.predict=true", "hardware=h100_sxm",
                          "study.n_trials=1")
    for text, said in (("{}", "no study, objectives"), ("[]", "not a JSON object")):
        (plan.results / "study.json").write_text(text)
        with pytest.raises(ValueError, match=said):
            load_study(plan.results)


def test_compare_fronts_keeps_apart_two_studies_of_one_name(tmp_path, capsys):
    # one study identity run in two results folders: compare_fronts showed one of them (exit 0);
    # one folder named twice was compared with itself
    from sweep.report.fronts import main

    plans = [run_tiny(tmp_path / d, "study.predict=true", "hardware=h100_sxm",
                      "study.n_trials=2")[0] for d in ("a", "b")]
    assert plans[0].results.name == plans[1].results.name
    out = tmp_path / "fronts"
    assert main([str(p.results) for p in plans] + ["--out", str(out)]) == 0
    shown = json.loads((out / "fronts.json").read_text())["studies"]
    assert len(shown) == 2, shown
    assert main([str(plans[0].results)] * 2 + ["--out", str(tmp_path / "x")]) == 2
    assert "named twice" in capsys.readouterr().err
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "fronts.json").write_text("[1]")  # not a comparison's: refused, said
    assert main([str(p.results) for p in plans] + ["--out", str(tmp_path / "y")]) == 2
    assert "not a comparison's" in capsys.readouterr().err


def test_contention_during_allows_the_clocks_slack_of_a_busy_tree(monkeypatch):
    # /proc/stat's ticks and the tree's runtimes disagree by a share of what the tree ran: on a
    # many-core host a fixed 0.5 core would flag every trial that keeps 60 cores busy
    from sweep.measure import contention as C

    hz = os.sysconf("SC_CLK_TCK")
    t = [0.0]
    monkeypatch.setattr(C.time, "monotonic", lambda: t[0])
    monkeypatch.setattr(C.os, "cpu_count", lambda: 64)

    def account(own_cores, other_cores):
        calls = iter([(0.0, 0.0), (64 * 10.0 * hz, (64 - own_cores - other_cores) * 10.0 * hz)])
        ticks = iter([0.0, own_cores * 10.0 * hz])
        monkeypatch.setattr(C, "_cpu_times", lambda: next(calls))
        monkeypatch.setattr(C, "_own_ticks", lambda: next(ticks))
        t[0] = 0.0
        start = C.mark({"type": "cpu"})
        t[0] = 10.0
        return C.during(start)

    assert account(60, 1.5) == ""  # 1.5 cores unaccounted beside 60 of the tree's: slack
    assert "3.0 of 64 cores busy" in account(60, 3.0)
    assert "0.8 of 64 cores busy" in account(1, 0.8)  # a small tree: the fixed bound
