"""A new user's first run: the calibration a study plans is bounded and incremental, a stale one is
measured again (or flagged), autotune choices are kept per device, progress shows on a terminal
only, and without a GPU the study's real designs are priced on the H100 beside the tiny
measurement."""

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from kernels import switches, tuning
from sweep.analysis import calibration_store as store
from sweep.analysis import fingerprints, needs, pricing
from sweep.analysis import predict as perf
from sweep.caches import calibration as cal
from sweep.caches import grids
from sweep.common.env import REPO, detect_device
from sweep.space import study_designs
from tests.helpers import run_tiny
from zoo import ModelConfig

TINY = ModelConfig.from_name("tiny")
WL = {"batch": 2, "prompt_len": 16, "new_tokens": 4}


def test_a_study_plans_its_calibration_in_bounded_time():
    """``design_space`` spans 8.5 million grid points: planning its calibration on a CUDA device
    (the designs, the entries they need, what an empty cache lacks) never enumerates them."""
    exp = yaml.safe_load((REPO / "conf/experiment/design_space.yaml").read_text())["experiment"]
    t0 = time.perf_counter()
    items = study_designs(exp["space"], ModelConfig.from_name("llama3_2_1b"),
                          {"batch": 1, "prompt_len": 512, "new_tokens": 128}, "cudagraph")
    want = needs.needs(items, "cuda")
    todo = needs.missing(None, want)
    grid = grids.attn_grid(None, todo, "cuda", False, False)
    took = time.perf_counter() - t0
    assert took < 5, took
    assert 8 <= len(items) <= 256
    for kind, most in needs.MOST.items():
        if kind == "moe_gemm":  # a dense space launches no grouped GEMM
            assert want[kind] == []
            continue
        assert 0 < len(want[kind]) <= most, kind
    assert todo == want and grid  # nothing cached: all of it, and a fit's grid


# the calibrations here judge what is measured, cached and measured again (conftest.device_free)
pytestmark = pytest.mark.usefixtures("device_free")


@pytest.fixture(scope="module")
def cpu_cal(tmp_path_factory, device_free):
    """A quick CPU calibration of two tiny designs, in a folder of its own."""
    d = tmp_path_factory.mktemp("cal")
    items = [(TINY, WL, "eager")]
    got = cal.ensure(detect_device("cpu"), items, switches.Switches(), cal_dir=d,
                     quick=True, log=lambda m: None)
    return d, items, got.meta, got.table


def test_a_second_study_measures_only_what_it_adds(cpu_cal):
    d, items, meta, table = cpu_cal
    assert meta["measured_now"] == len(table) > 0 and set(meta["fingerprints"]) >= {
        "gemm", "launch", "decode_attn/torch"}
    dev = detect_device("cpu")
    again = cal.ensure(dev, items, switches.Switches(), cal_dir=d, quick=True, log=lambda m: None)
    assert again.meta["measured_now"] == 0 and len(again.table) == len(table)
    wider = TINY.replace(d_model=192, n_heads=6, n_kv_heads=2, ffn_dim=384)
    more = cal.ensure(dev, items + [(wider, WL, "eager")], switches.Switches(),
                      cal_dir=d, quick=True, log=lambda m: None)
    new = more.table.iloc[len(table):]
    assert 0 < more.meta["measured_now"] == len(new) < len(table)  # its own shapes, no groups again
    # two calibration runs leave the table, its meta and one log of the last child, no more
    hidden = sorted(p.name for p in d.iterdir() if p.name.startswith("."))
    assert hidden == [".cpu.last.log"], hidden
    assert set(new.kind) <= {"gemm", "decode_attn", "prefill_attn"}
    assert ((new.kind == "gemm") & (new.K == 192)).any()


def test_a_changed_kernel_is_measured_again_or_flagged(cpu_cal, monkeypatch, tmp_path):
    """A family whose fingerprint changed (its kernel's code, a switch, a version) is measured
    again; with ``calibration_policy=frozen`` nothing is measured and every prediction from it
    says ``stale calibration``."""
    import shutil

    d, items, _, _ = cpu_cal
    for p in d.iterdir():
        shutil.copy(p, tmp_path / p.name)
    table = store.load("cpu", cal_dir=tmp_path).table
    real = cal.fingerprints

    def changed(device, sw):
        fp = real(device, sw)
        return dict(fp, **{"decode_attn/torch": "0" * 12})  # zoo/gqa.py "edited"

    monkeypatch.setattr(cal, "fingerprints", changed)
    dev = detect_device("cpu")
    frozen = cal.ensure(dev, items, switches.Switches(), cal_dir=tmp_path, quick=True,
                        policy="frozen", log=lambda m: None)
    assert frozen.meta["stale"] == ["decode_attn/torch"] and frozen.meta["measured_now"] == 0
    row = perf.predict(TINY, WL, _cpu_spec(), pricing.Calibrated(frozen), mode="eager")
    assert row["prediction_stale"] is True
    assert row["prediction_notes"].startswith("stale calibration: decode_attn/torch")
    from sweep.analysis import targets  # a predict-only row says so too
    from sweep.analysis.hardware import load_spec

    h100 = load_spec("h100_sxm")
    monkeypatch.setattr(targets, "predict", lambda *a, **k: dict(row, prediction_stale=True))
    assert targets.predict_on(TINY.replace(dtype="bf16", kv_dtype="bf16"), WL, h100)[
        "prediction_stale"] is True
    fresh = cal.ensure(dev, items, switches.Switches(), cal_dir=tmp_path, quick=True,
                       log=lambda m: None)
    tab = fresh.table
    n_attn = int((table.family == "decode_attn/torch").sum())
    n_new = int((tab.family == "decode_attn/torch").sum())  # those these designs need, again
    assert 0 < n_new <= n_attn and fresh.meta["measured_now"] == n_new \
        and fresh.meta["stale"] == []
    assert len(tab) - n_new == len(table) - n_attn  # every other family kept as it was
    assert json.loads((tmp_path / "cpu.json").read_text())["fingerprints"][
        "decode_attn/torch"] == "0" * 12
    row = perf.predict(TINY, WL, _cpu_spec(), pricing.Calibrated(fresh), mode="eager")
    assert row["prediction_stale"] is False


def test_the_fingerprint_follows_code_switches_and_versions(monkeypatch):
    dev = {"name": "NVIDIA H100 80GB HBM3", "driver": "580", "type": "cuda"}
    a = fingerprints.fingerprints(dev, switches.Switches())
    b = fingerprints.fingerprints(dev, switches.Switches(gemv_prefetch=False))
    assert a["gemv"] != b["gemv"] and a["gemm"] == b["gemm"]
    assert a["decode_attn/triton"] == b["decode_attn/triton"]
    c = fingerprints.fingerprints(dict(dev, driver="581"), switches.Switches())
    assert all(a[f] != c[f] for f in a)
    # a comment or docstring is not the code; a statement is
    src = (REPO / "kernels/swiglu.py").read_text()
    assert tuning.module_code(str(REPO / "kernels/swiglu.py")) == tuning.module_code("swiglu")
    edited = src.replace('"""', '"""Edited. ', 1) + "\n# a comment\n"
    tree_a, tree_b = _code(src), _code(edited)
    assert tree_a == tree_b and _code(src + "\nX = 1\n") != tree_a


def test_fixed_costs_are_the_hosts(monkeypatch, tmp_path):
    """The launch family's fingerprint holds the host (a shipped or transferred calibration's
    fixed costs were measured on another machine's CPU); the GPU's families do not.
    ``host_costs`` measures this host's fixed costs when they were measured elsewhere, replacing
    that family only, and leaves a calibration measured here as it is."""
    import pandas as pd

    dev = {"name": "NVIDIA H100 80GB HBM3", "driver": "580", "type": "cuda"}
    sw = switches.Switches()
    monkeypatch.setattr(cal.platform, "node", lambda: "host-a")
    a = fingerprints.fingerprints(dev, sw)
    monkeypatch.setattr(cal.platform, "node", lambda: "host-b")
    b = fingerprints.fingerprints(dev, sw)
    assert a["launch"] != b["launch"]
    assert all(a[f] == b[f] for f in a if f != "launch")

    table = pd.DataFrame([
        {"kind": "launch", "op": "eager_layer_torch", "time_s": 5e-4, "family": "launch"},
        {"kind": "launch", "op": "graph_kernel", "time_s": 1e-6, "family": "launch"},
        {"kind": "gemm", "M": 8.0, "N": 64.0, "K": 64.0, "time_s": 2e-6, "family": "gemm"}])
    meta = {"device": dev["name"], "fingerprints": dict(a)}
    runs = []

    def fake_run(spec, out, timeout_s=900.0, on_line=None, keep_log=None):
        runs.append(spec)
        pd.DataFrame([{"kind": "launch", "op": "eager_layer_torch", "time_s": 9e-4},
                      {"kind": "launch", "op": "graph_kernel", "time_s": 2e-6}]).to_parquet(out)
        return 0, ""

    from sweep.measure import calibration_run

    monkeypatch.setattr(calibration_run, "run", fake_run)
    here = cal.host_costs(dev, store.Calibration(meta, table), sw, log=lambda *_: None)
    m2, t2 = here.meta, here.table
    assert runs and runs[0]["base"] == ["launch"] and not runs[0]["gemm"]
    assert m2["fingerprints"]["launch"] == b["launch"]
    assert m2["fingerprints"]["gemm"] == a["gemm"]
    got = t2.set_index("op").time_s
    assert got["eager_layer_torch"] == 9e-4 and got["graph_kernel"] == 2e-6
    assert (t2.kind == "gemm").sum() == 1 and len(t2) == 3
    again = cal.host_costs(dev, here, sw, log=lambda *_: None)  # measured here: as it is
    assert len(runs) == 1 and again is here


def _code(src: str) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    try:
        return tuning.module_code.__wrapped__(f.name)
    finally:
        os.unlink(f.name)


def _cpu_spec():
    from sweep.analysis.hardware import load_spec

    return load_spec("cpu")


def test_autotune_choices_are_kept_per_device(tmp_path, monkeypatch):
    """A choice recorded in one process is found by the next (``<results>/tuning``), never under
    another kernel fingerprint; a new shape's tuning is bounded to the fastest of the others."""
    monkeypatch.setattr(tuning, "kernel_fingerprint", lambda k: "fp1")
    monkeypatch.setattr(tuning, "_new", {})
    tuning.configure(tmp_path)
    dev = "NVIDIA H100 80GB HBM3"
    a, b, c = ({"BLOCK_N": n, "num_warps": 4, "num_stages": 3} for n in (32, 64, 128))
    tuning.record("decode_attention", ("x", 1, 64, 4), a, dev, [b, c])
    tuning.record("decode_attention", ("x", 1, 128, 4), b, dev, [a])
    tuning.record("decode_attention", ("x", 1, 128, 8), a, dev, [])
    tuning.record("decode_linear", (1, 8, 8, "none"), "cublas", dev)
    [path] = tuning.save()
    assert path.name == "nvidia_h100_80gb_hbm3.json"
    monkeypatch.setattr(tuning, "_new", {})
    tuning.configure(tmp_path)  # a new process
    assert tuning.lookup("decode_attention", ("x", 1, 64, 4), dev) == a
    assert tuning.lookup("decode_linear", (1, 8, 8, "none"), dev) == "cublas"
    assert tuning.lookup("decode_attention", ("x", 1, 64, 8), dev) is None
    assert tuning.lookup("decode_attention", ("x", 1, 64, 4), "NVIDIA H200") is None
    assert tuning.candidates("decode_attention", "x|", dev) == [a, b, c]
    assert tuning.candidates("decode_attention", "y|", dev) == []
    monkeypatch.setattr(tuning, "kernel_fingerprint", lambda k: "fp2")  # the kernel changed
    tuning.configure(tmp_path)
    assert tuning.lookup("decode_attention", ("x", 1, 64, 4), dev) is None
    tuning.configure(None)


def test_shipping_choices_keeps_the_kernels_not_tuned_again(tmp_path, monkeypatch):
    """``calibrate --ship`` after one kernel changed: the shipped file keeps the other kernels'
    choices (a fresh machine would tune them all again) and takes the changed kernel's new ones."""
    fps = {"gemv": "new", "decode_attention": "same", "decode_linear": "new"}
    monkeypatch.setattr(tuning, "kernel_fingerprint", lambda k: fps[k])
    shipped, src = tmp_path / "shipped", tmp_path / "results"
    shipped.mkdir(), src.mkdir()
    name = "nvidia_h200.json"
    (shipped / name).write_text(json.dumps({"device": "NVIDIA H200", "kernels": {
        "gemv": {"fingerprint": "old", "choices": {"a": 1, "b": 2}},
        "decode_attention": {"fingerprint": "same", "choices": {"c": 3, "d": 4}}}}))
    (src / name).write_text(json.dumps({"device": "NVIDIA H200", "kernels": {
        "gemv": {"fingerprint": "new", "choices": {"a": 5}},
        "decode_attention": {"fingerprint": "same", "choices": {"d": 6}},
        # a kernel this machine did not tune since it changed: its stale section is left out
        "decode_linear": {"fingerprint": "old", "choices": {"e": 7}}}}))
    got = json.loads(tuning.ship(src / name, shipped).read_text())["kernels"]
    assert got["gemv"] == {"fingerprint": "new", "choices": {"a": 5}}
    assert got["decode_attention"]["choices"] == {"c": 3, "d": 6}
    assert "decode_linear" not in got
    (src / name).write_text(json.dumps({"kernels": {"gemv": {"choices": {}}}}))
    with pytest.raises(ValueError, match="not a choices file"):
        tuning.ship(src / name, shipped)


def test_switches_refuse_bad_values():
    with pytest.raises(ValueError, match="unknown switch"):
        switches.Switches.from_dict({"rope_in_atention": False})
    with pytest.raises(ValueError, match="switches.pdl=1 must be true or false"):
        switches.Switches.from_dict({"pdl": 1})
    assert switches.Switches.from_dict({"pdl": False}).pdl is False
    with switches.use(rope_in_attention=False):
        assert switches.current().rope_in_attention is False
    assert switches.current().rope_in_attention is True


_BAR_SCRIPT = """
import sys
from sweep.report.progress import StudyProgress, TaskProgress
p = StudyProgress(3)
p.start("n_kv_heads=1")
p.on_line("@phase measuring decode")
p.line("[1/3] n_kv_heads=1: decode 10 tok/s")
p.done("n_kv_heads=1 10 tok/s")
p.close()
with TaskProgress("calibration") as t:
    t.on_line("@progress 3/9 GEMMs")
"""


def test_progress_shows_on_a_terminal_and_not_in_a_pipe():
    import fcntl
    import pty
    import struct
    import termios

    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm")
    piped = subprocess.run([sys.executable, "-c", _BAR_SCRIPT], env=env, capture_output=True,
                           text=True, timeout=120, cwd=REPO)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "[1/3] n_kv_heads=1: decode 10 tok/s\n" and "designs" not in \
        piped.stderr
    master, slave = pty.openpty()  # a terminal of 100 x 30
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", _BAR_SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=slave, cwd=REPO)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=120)
    text = out.decode(errors="replace")
    assert "designs: 1/3" in text and "measuring decode" in text, text
    assert "[1/3] n_kv_heads=1" in text  # a design's line goes above the bar


def test_without_a_gpu_the_real_designs_are_priced_on_the_h100(tmp_path):
    """The CPU main job measures the tiny model and prices the experiment's real designs
    (Llama-3.2-1B shape, MQA .. MHA, batch 8, prompt 4096) on the H100, labelled predicted."""
    import pandas as pd

    plan, _, df = run_tiny(tmp_path, "+experiment=gqa_vs_mha", "study.n_trials=1")
    assert (df.state == "COMPLETE").all() and df.model.eq("tiny").all() and len(df) == 1
    pred = pd.read_csv(plan.results / "predicted_h100_sxm.csv")
    assert len(pred) == 6 and pred.predicted.all() and pred.model.eq("llama3_2_1b").all()
    assert sorted(pred.n_kv_heads) == [1, 2, 4, 8, 16, 32]
    assert (pred.batch == 8).all() and (pred.prompt_len == 4096).all()
    assert pred.target.eq("h100_sxm").all() and pred.prediction_basis.str.len().gt(0).all()
    done = pred[pred.state == "COMPLETE"].sort_values("n_kv_heads")
    assert len(done) == 6 and (done.decode_tok_s > 0).all()
    assert done.decode_tok_s.iloc[0] > done.decode_tok_s.iloc[-1]  # GQA: fewer KV bytes, faster
    shipped = list(store.SHIPPED_DIR.glob("nvidia_h100*.json"))
    assert done.basis_kind.eq("calibrated" if shipped else "roofline").all()


def test_the_hosts_eager_cost_is_a_median_over_rounds_with_its_spread(monkeypatch):
    """The eager host costs are timed in interleaved rounds of the 2- and 10-layer models and
    kept as a spread (one reading differed 1.8x between two calibrations on one H200 host): per
    layer is the median of the rounds' differences / 8, even when one round ran slow."""
    import types

    import torch

    import zoo
    from sweep.measure import fixed_costs

    # a host whose forward costs 1 ms + 0.5 ms per layer, the 10-layer model's third round
    # (its calls 46-65: 5 warm-up calls, then 2 groups of 10 per round) 4x slow: the median
    # per layer stays 0.5 ms, the spread shows the slow round
    now = [0.0]

    class FakeModel:
        def __init__(self, cfg):
            self.positions, self.n_layers, self.calls = torch.arange(64), cfg.n_layers, 0

        def setup_cache(self, *a):
            pass

        def __call__(self, *a, **k):
            self.calls += 1
            slow = 4.0 if self.n_layers == 10 and 46 <= self.calls <= 65 else 1.0
            now[0] += (1e-3 + 5e-4 * self.n_layers) * slow

    monkeypatch.setattr(zoo.Transformer, "build", staticmethod(lambda cfg, dev: FakeModel(cfg)))
    monkeypatch.setattr(fixed_costs, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    per, rest = fixed_costs._eager_host("cpu", "torch", rounds=5, forwards=10)
    assert per["n"] == 5 and rest["n"] == 5
    assert per["median"] == pytest.approx(5e-4)
    assert per["max"] > 1.5 * per["median"]  # the slow round is in the spread, not the price
    assert rest["median"] == pytest.approx(1e-3)


def test_shipping_a_gpu_hosts_choices_from_another_triton(tmp_path):
    """A GPU host's choices file shipped on a machine of another Triton (the CPU host, 3.9,
    merging an H100's, 3.6): with the GPU host's version named, its current sections are kept
    and merged; without it every section reads as stale and is left out (what happened by
    hand on 2026-11-27, results/reference/reship_h100/2026-11-27f/)."""
    ver = "3.6.0"
    fp = {k: tuning.fingerprint(ver, modules=tuning.SOURCES[k]) for k in tuning.SOURCES}
    shipped, src = tmp_path / "shipped", tmp_path / "results"
    shipped.mkdir(), src.mkdir()
    name = "nvidia_h100.json"
    (shipped / name).write_text(json.dumps({"device": "H100", "kernels": {
        "gemv": {"fingerprint": fp["gemv"], "choices": {"a": 1}},
        "decode_attention": {"fingerprint": "old", "choices": {"c": 3}}}}))
    (src / name).write_text(json.dumps({"device": "H100", "kernels": {
        "decode_attention": {"fingerprint": fp["decode_attention"], "choices": {"d": 4}}}}))
    got = json.loads(tuning.ship(src / name, shipped, triton_version=ver).read_text())["kernels"]
    assert got["gemv"]["choices"] == {"a": 1}
    assert got["decode_attention"]["choices"] == {"d": 4}
    import triton

    if triton.__version__ != ver:  # this machine's own version reads them all as stale
        (shipped / name).write_text(json.dumps({"kernels": got}))
        assert json.loads(tuning.ship(src / name, shipped).read_text())["kernels"] == {}
