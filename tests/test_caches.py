"""Device caches under many processes: the calibration, the tile choices and the ceilings are
read, topped up and written back one process at a time (``sweep.common.locks``), written in one
atomic step, and a damaged cache is measured again with a line naming the file."""

import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from sweep.analysis import calibration_store as store
from sweep.caches import calibration as cal
from sweep.common.env import REPO
from sweep.common.row import CONTENDED

# One process topping up the CPU calibration with its own five GEMM shapes: the measurement
# child replaced by rows written after a pause, long enough for the other process to come in
TOP_UP = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import pandas as pd
    from kernels.switches import Switches
    from sweep.caches import calibration as cal
    from sweep.measure import calibration_run as run_cal

    tag, d = int(sys.argv[1]), Path(sys.argv[2])

    def fake_run(spec, out, timeout_s, on_line=None, keep_log=None):
        rows = [dict(kind="gemm", M=m, N=n, K=k, dtype="fp32", time_s=1e-6, time_s_min=1e-6,
                     time_s_p90=1e-6) for m, n, k in spec["gemm"]]
        rows += [dict(kind="launch", op=g, time_s=1e-6, time_s_min=1e-6, time_s_p90=1e-6)
                 for g in spec["base"]]
        time.sleep(1.5)
        pd.DataFrame(rows).to_parquet(out)
        return 0, ""

    run_cal.run = fake_run
    cal.contention.sample = lambda device: ""  # (this test: two processes at once, not a load)
    cal.contention.during = lambda start: ""
    cal.needs = lambda items, device_type: {
        "gemm": [(100 * tag + i, 64, 64, "fp32") for i in range(5)]}
    cal.attn_grid = lambda *a, **k: []
    cal.ensure({"type": "cpu", "name": "cpu"}, [], Switches(), cal_dir=d, quick=True)
""")


# the calibrations here judge what is measured, cached and measured again (conftest.device_free)
pytestmark = pytest.mark.usefixtures("device_free")


def test_two_processes_top_up_one_calibration_at_once(tmp_path):
    """Two processes add their own entries to one cache at the same moment: both sets are kept
    (the second waits for the first and adds only its own), the table and its meta agree, and
    the meta travels inside the table's file (one atomic write)."""
    procs = [subprocess.Popen([sys.executable, "-c", TOP_UP, str(tag), str(tmp_path)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for tag in (1, 2)]
    logs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    assert any("waiting for another process" in log for log in logs), logs
    got = store.load("cpu", cal_dir=tmp_path)
    meta, table = got.meta, got.table
    gemm = table[table.kind == "gemm"]
    assert sorted(gemm.M) == [100, 101, 102, 103, 104, 200, 201, 202, 203, 204]
    assert meta["entries"] == len(table)
    assert json.loads(store.paths("cpu", tmp_path)[0].read_text())["entries"] == len(table)
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob(".*.new.parquet"))


def test_a_damaged_calibration_cache_is_measured_again_saying_so(tmp_path, monkeypatch):
    from kernels.switches import Switches
    from sweep.measure import calibration_run as run_cal

    meta_p, tab_p = store.paths("cpu", tmp_path)
    meta_p.write_text("{}")
    tab_p.write_bytes(b"PAR1 truncated")
    measured = []

    def fake_run(spec, out, timeout_s, on_line=None, keep_log=None):
        measured.append(spec)
        pd.DataFrame([dict(kind="gemm", M=1, N=64, K=64, dtype="fp32", time_s=1e-6,
                           time_s_min=1e-6, time_s_p90=1e-6)]).to_parquet(out)
        return 0, ""

    monkeypatch.setattr(run_cal, "run", fake_run)
    monkeypatch.setattr(cal, "needs", lambda items, t: {"gemm": [(1, 64, 64, "fp32")]})
    monkeypatch.setattr(cal, "attn_grid", lambda *a, **k: [])
    lines = []
    table = cal.ensure({"type": "cpu", "name": "cpu"}, [], Switches(), cal_dir=tmp_path,
                       quick=True, log=lines.append).table
    assert measured and len(table) == 1
    said = [m for m in lines if "unreadable" in m]
    assert said and str(tab_p) in said[0] and "measured again" in said[0], lines
    assert store.load("cpu", cal_dir=tmp_path).table.equals(table)


SAVE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from kernels import tuning

    tag, d = int(sys.argv[1]), Path(sys.argv[2])
    tuning.kernel_fingerprint = lambda k: "fp"
    tuning.configure(d)
    for i in range(40):
        tuning.record("gemv", (tag, i), {"BLOCK_N": 16}, "DEV")
        tuning.save()
""")


def test_two_processes_saving_tile_choices_keep_both(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", SAVE, str(tag), str(tmp_path)], cwd=REPO)
             for tag in (1, 2)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    data = json.loads((tmp_path / "dev.json").read_text())
    keys = set(data["kernels"]["gemv"]["choices"])
    assert keys == {f"{t}|{i}" for t in (1, 2) for i in range(40)}


def test_a_damaged_ceilings_cache_is_measured_again(tmp_path, monkeypatch):
    from sweep.caches import ceiling_cache as cached
    from sweep.measure import ceilings, contention

    (tmp_path / "cpu.json").write_text('{"copy_bytes_s": 1')  # cut off mid-write
    monkeypatch.setattr(ceilings, "run", lambda *a, **k: {"copy_bytes_s": 2.0e9})
    monkeypatch.setattr(contention, "sample", lambda device: "")  # (CI's other worker)
    monkeypatch.setattr(contention, "during", lambda start: "")
    lines = []
    got = cached.measure_ceilings({"type": "cpu", "name": "cpu"}, cache_dir=tmp_path,
                                  on_line=lines.append)
    assert got == {"copy_bytes_s": 2.0e9}
    assert any("unreadable" in m and "cpu.json" in m for m in lines), lines
    assert json.loads((tmp_path / "cpu.json").read_text()) == got


def test_a_gpus_ceilings_without_the_power_limits_duties_are_measured_again(tmp_path,
                                                                             monkeypatch):
    """A GPU's cache from before ``power_slowdown_by_duty`` (2026-12-06) is measured again (and
    serves, said, when that fails); one with it is taken as cached; a CPU's never needs it."""
    from sweep.caches import ceiling_cache as cached
    from sweep.measure import ceilings, contention

    runs = []
    new = {"copy_bytes_s": 3e12, "power_onset_s": 0.03, "power_slowdown_by_duty": [[0.5, 1.02]]}
    monkeypatch.setattr(ceilings, "run", lambda *a, **k: runs.append(1) or new)
    monkeypatch.setattr(contention, "sample", lambda device: "")
    monkeypatch.setattr(contention, "during", lambda start: "")
    gpu = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"}
    (tmp_path / "nvidia_h100_80gb_hbm3.json").write_text(
        json.dumps({"copy_bytes_s": 2.9e12, "power_onset_s": 0.03}))
    assert cached.measure_ceilings(gpu, cache_dir=tmp_path) == new and len(runs) == 1
    assert cached.measure_ceilings(gpu, cache_dir=tmp_path) == new and len(runs) == 1
    (tmp_path / "cpu.json").write_text(json.dumps({"copy_bytes_s": 2e10}))
    assert cached.measure_ceilings({"type": "cpu", "name": "cpu"},
                                   cache_dir=tmp_path) == {"copy_bytes_s": 2e10}
    assert len(runs) == 1
    # measured again and failing (a timeout, a busy GPU): the old cache serves, said
    old = {"copy_bytes_s": 2.9e12, "power_onset_s": 0.03}
    (tmp_path / "nvidia_h100_80gb_hbm3.json").write_text(json.dumps(old))
    monkeypatch.setattr(ceilings, "run", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("ceilings measurement timed out")))
    lines = []
    assert cached.measure_ceilings(gpu, cache_dir=tmp_path, on_line=lines.append) == old
    assert any("the cached ones serve" in m for m in lines), lines


def test_ceilings_measured_beside_another_job_are_measured_again_next_time(tmp_path,
                                                                           monkeypatch):
    """Ceilings measured while another job used the device serve this study with the evidence
    (``contended_evidence``), said, and the next study measures them again; once measured alone
    they are cached as they are."""
    from sweep.caches import ceiling_cache as cached
    from sweep.measure import ceilings, contention

    runs, busy = [], ["2.0 of 2 cores busy with other processes"]
    monkeypatch.setattr(ceilings, "run", lambda *a, **k: runs.append(1) or {"copy_bytes_s": 9e9})
    monkeypatch.setattr(contention, "sample", lambda device: busy[0])
    monkeypatch.setattr(contention, "during", lambda start: "")
    dev, lines = {"type": "cpu", "name": "cpu"}, []
    first = cached.measure_ceilings(dev, cache_dir=tmp_path, on_line=lines.append)
    assert first["contended_evidence"] == f"before: {busy[0]}; after: {busy[0]}"
    assert any("measured again next time" in m for m in lines), lines
    # a study's worker takes them as cached; a measurement that fails falls back to them
    assert cached.measure_ceilings(dev, cache_dir=tmp_path, again_if_contended=False) == first
    real = ceilings.run
    monkeypatch.setattr(ceilings, "run", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("child died")))
    assert cached.measure_ceilings(dev, cache_dir=tmp_path, on_line=lines.append) == first
    monkeypatch.setattr(ceilings, "run", real)
    assert len(runs) == 1
    busy[0] = ""
    second = cached.measure_ceilings(dev, cache_dir=tmp_path, on_line=lines.append)
    assert len(runs) == 2 and "contended_evidence" not in second
    assert any("the cached ones were measured while" in m for m in lines), lines
    assert cached.measure_ceilings(dev, cache_dir=tmp_path) == second and len(runs) == 2


def test_a_long_group_keeps_what_it_measured_every_chunk(monkeypatch):
    """A calibration child cut off inside a long group of shapes (the H100's 206 decode-attention
    shapes take ~800 s, more than one device call) keeps every finished chunk of ``CHUNK``
    shapes, so the next run measures only the rest."""
    from sweep.measure import calibration_run as run_cal
    from sweep.measure import microbench as mb

    shapes = [dict(impl="torch", kv_dtype="fp32", B=1, Hkv=1, G=1, S=s, D=8) for s in range(40)]
    seen = []

    def fake(device, tm, rnd, xs, progress=None):
        if len(seen) == 2:  # the third chunk: the child is killed here
            raise KeyboardInterrupt
        seen.append(len(xs))
        return [dict(kind="decode_attn", S=x["S"], time_s=1e-6) for x in xs]

    monkeypatch.setattr(mb, "decode_attention", fake)
    kept = []
    with pytest.raises(KeyboardInterrupt):
        run_cal.measure({"device": "cpu", "decode_attn": shapes}, log=lambda m: None,
                        partial=lambda rows: kept.append([r["S"] for r in rows]))
    assert seen == [run_cal.CHUNK, run_cal.CHUNK]
    assert kept[-1] == list(range(2 * run_cal.CHUNK))


def test_a_disturbed_timing_is_taken_again_and_the_steadiest_kept():
    from sweep.measure.microbench import steadiest

    seq = iter([{"min": 1.0, "p90": 2.0, "median": 1.5}, {"min": 1.0, "p90": 1.1, "median": 1.02},
                {"min": 0.1, "p90": 9.0, "median": 5.0}])
    calls = []

    def measure():
        calls.append(1)
        return next(seq)

    assert steadiest(measure)["median"] == 1.02 and len(calls) == 2  # steady on the second try
    wild = iter([{"min": 1.0, "p90": 3.0, "median": 2}, {"min": 1.0, "p90": 2.0, "median": 1.6},
                 {"min": 1.0, "p90": 2.5, "median": 1.9}, {"min": 1.0, "p90": 1.0, "median": 1}])
    got = steadiest(lambda: next(wild), retries=2, noisy=1.25)
    assert got["median"] == 1.6  # three tries at most, the tightest of them
    assert next(wild)["median"] == 1  # the fourth never taken


def test_a_gemm_entry_far_slower_than_its_neighbours_is_measured_again(tmp_path, monkeypatch):
    """A GEMM entry timed over 10x every entry of like FLOPs (a CPU's 2 x 512 x 128 read 20 ms
    beside its neighbours' 9-19 us while the machine was busy, and priced every later study 26x
    slow) is taken once more and the second timing kept; the shipped tables' entries are within
    1.9x of their neighbours, so none of them would be."""
    from kernels.switches import Switches
    from sweep.measure import calibration_run as run_cal

    shapes = [(2, n, 128) for n in (128, 256, 384, 512, 640, 768)]
    specs = []

    def fake_run(spec, out, timeout_s, on_line=None, keep_log=None):
        specs.append(spec)
        rows = [dict(kind="gemm", M=m, N=n, K=k, dtype="fp32", flops=2.0 * m * n * k,
                     time_s=(2e-2 if (n == 512 and len(specs) == 1) else 9e-6 + n * 1e-8),
                     time_s_min=9e-6, time_s_p90=2e-2) for m, n, k in spec["gemm"]]
        rows += [dict(kind="launch", op=g, time_s=1e-6, time_s_min=1e-6, time_s_p90=1e-6)
                 for g in spec["base"]]
        pd.DataFrame(rows).to_parquet(out)
        return 0, ""

    monkeypatch.setattr(run_cal, "run", fake_run)
    monkeypatch.setattr(cal, "needs", lambda items, device_type: {
        "gemm": [(*s, "fp32") for s in shapes]})
    monkeypatch.setattr(cal, "attn_grid", lambda *a, **k: [])
    logs = []
    got = cal.ensure({"type": "cpu", "name": "cpu"}, [], Switches(), cal_dir=tmp_path, quick=True,
                     log=logs.append)
    assert [sp["gemm"] for sp in specs] == [[list(s) for s in shapes], [[2, 512, 128]]]
    assert any("1 GEMM entries read over 10x" in m and "measured again" in m for m in logs)
    g = got.table[got.table.kind == "gemm"]
    assert len(g) == len(shapes) and g[g.N == 512].time_s.iloc[0] < 1e-4
    assert cal.gemm_outliers(g, None) == []
    assert cal.gemm_outliers(pd.DataFrame({"kind": ["launch"], "time_s": [1e-6]}), None) == []
    # the second measurement running out of time: the first one kept, said so
    specs.clear()

    def late(spec, out, timeout_s, on_line=None, keep_log=None):
        if specs:
            raise run_cal.ChildTimeout("exceeded 1 s and was killed")
        return fake_run(spec, out, timeout_s, on_line)

    monkeypatch.setattr(run_cal, "run", late)
    logs.clear()
    kept = cal.ensure({"type": "cpu", "name": "cpu"}, [], Switches(), cal_dir=tmp_path / "b",
                      quick=True, log=logs.append)
    assert len(kept.table[kept.table.kind == "gemm"]) == len(shapes)
    assert any("measuring them again failed" in m for m in logs)
    for f in ("nvidia_h100_80gb_hbm3", "nvidia_h200"):  # no shipped entry would be taken again
        t = pd.read_parquet(store.SHIPPED_DIR / f"{f}.parquet")
        assert cal.gemm_outliers(t[t.kind == "gemm"], None) == []


def test_a_calibration_cut_off_saves_and_ships_what_it_measured(tmp_path, monkeypatch):
    """A calibration that runs out of time after some entries (an H200's 1117 entries did not fit
    one 10-minute device call, 2026-11-28) saves them and raises ``CalibrationCut``;
    ``sweep.cli.calibrate --ship`` then ships them with their tile choices (exit 1), so the same
    command in the next call measures only the rest; without ``--ship`` the error stands."""
    from kernels import tuning
    from kernels.switches import Switches
    from sweep.cli import calibrate as cli
    from sweep.measure import calibration_run as run_cal

    shapes = [(2, n, 128) for n in (128, 256, 384)]

    def cut_run(spec, out, timeout_s, on_line=None, keep_log=None):  # two entries done, then killed
        rows = [dict(kind="gemm", M=m, N=n, K=k, dtype="fp32", flops=2.0 * m * n * k,
                     time_s=1e-5, time_s_min=1e-5, time_s_p90=1e-5) for m, n, k in spec["gemm"][:2]]
        pd.DataFrame(rows).to_parquet(out.with_name(out.name + ".partial"))
        raise run_cal.ChildTimeout("exceeded 1 s and was killed")

    monkeypatch.setattr(run_cal, "run", cut_run)
    monkeypatch.setattr(cal, "needs", lambda items, device_type: {
        "gemm": [(*s, "fp32") for s in shapes]})
    monkeypatch.setattr(cal, "attn_grid", lambda *a, **k: [])
    with pytest.raises(cal.CalibrationCut, match="2 entries measured and saved"):
        cal.ensure({"type": "cpu", "name": "cpu"}, [], Switches(), cal_dir=tmp_path, quick=True,
                   log=lambda m: None)
    saved = pd.read_parquet(store.paths("cpu", tmp_path)[1])
    assert sorted(saved[saved.kind == "gemm"].N) == [128, 256]

    def cut_calibrate(device, designs, cal_dir, tuning_dir, **kw):
        cal_dir.mkdir(parents=True, exist_ok=True)
        for p in store.paths(device["name"], tmp_path):
            (cal_dir / p.name).write_bytes(p.read_bytes())
        raise cal.CalibrationCut("calibration exceeded 1 s and was killed; 2 entries measured")

    ship = tmp_path / "shipped"
    monkeypatch.setattr(cal, "calibrate", cut_calibrate)
    monkeypatch.setattr(store, "SHIPPED_DIR", ship)
    monkeypatch.setattr(tuning, "ship", lambda tuned: None)
    monkeypatch.setattr("sweep.caches.ceiling_cache.measure_ceilings", lambda *a, **k: {})
    monkeypatch.setattr(cli, "detect_device", lambda name: {"type": "cpu", "name": "cpu"})
    args = ["--device", "cpu", "--results-dir", str(tmp_path / "r"), "--timeout", "1"]
    assert cli.main(args + ["--ship"]) == 1
    assert len(pd.read_parquet(ship / store.paths("cpu", tmp_path)[1].name)) == len(saved)
    with pytest.raises(cal.CalibrationCut):
        cli.main(args)


def test_the_cpu_ceilings_hold_a_bf16_gemm_rate():
    """A full-size bf16 design on the CPU is bounded by its prefills' FLOPs
    (``analysis.memory.check_time``): the CPU's ceilings measure bf16 beside fp32 (not fp16:
    ~1 GFLOP/s on a CPU without fp16 units)."""
    from sweep.measure import ceilings

    got = ceilings.measure("cpu")
    assert got["gemm_flops_bf16"] > 0 and got["gemm_flops_fp32"] > 0 and got["copy_bytes_s"] > 0
    assert "gemm_fp16" not in got["method"]


def test_a_group_with_one_family_gone_stale_is_measured_again(tmp_path, monkeypatch):
    """The elementwise group measures two families; with ``elementwise/triton`` dropped as stale
    (the MoE kernels changed) and ``elementwise/torch`` kept, the group is measured again: it
    was not, and a fresh H200 priced an MoE design roofline-only, its Triton norms unpriced
    (2026-11-28). A family that was never there (a CPU's Triton entries) does not trigger it."""
    from kernels.switches import Switches
    from sweep.measure import calibration_run as run_cal

    specs = []

    def fake_run(spec, out, timeout_s, on_line=None, keep_log=None):
        specs.append(spec)
        pd.DataFrame([dict(kind="launch", op=g, time_s=1e-6, time_s_min=1e-6, time_s_p90=1e-6)
                      for g in spec["base"]]).to_parquet(out)
        return 0, ""

    table = pd.DataFrame([dict(kind="elementwise", op="rmsnorm", impl=i, family=f"elementwise/{i}",
                               time_s=1e-6, bytes=1e3) for i in ("torch", "triton")]
                         + [dict(kind="launch", op="graph_kernel", family="launch", time_s=1e-6)])
    have = store.Calibration({"version": cal.VERSION, "fingerprints": {}}, table)
    monkeypatch.setattr(run_cal, "run", fake_run)
    monkeypatch.setattr(cal, "needs", lambda items, device_type: {})
    monkeypatch.setattr(cal, "attn_grid", lambda *a, **k: [])
    monkeypatch.setattr(cal, "load", lambda *a, **k: have)
    for stale, want in ((["elementwise/triton"], ["elementwise"]), (["launch"], ["launch"])):
        specs.clear()
        monkeypatch.setattr(cal, "stale_families", lambda meta, current, s=stale: list(s))
        got = cal.ensure({"type": "cpu", "name": "cpu"}, [], Switches(), cal_dir=tmp_path,
                         quick=True)
        assert [sp["base"] for sp in specs] == [want], stale
        if want == ["elementwise"]:  # the group's kept rows replaced, not doubled
            assert not got.table.family.isin(["elementwise/torch", "elementwise/triton"]).any()
    cpu = have.with_(table=table[table.family != "elementwise/triton"])
    monkeypatch.setattr(cal, "load", lambda *a, **k: cpu)
    monkeypatch.setattr(cal, "stale_families", lambda meta, current: [])
    specs.clear()
    cal.ensure({"type": "cpu", "name": "cpu"}, [], Switches(), cal_dir=tmp_path, quick=True)
    assert specs == []


def test_a_family_asked_again_is_measured_again_entry_by_entry(tmp_path, monkeypatch):
    """``ensure(again=("gemv",))`` (``calibrate --again gemv``): every GEMV entry the table held
    is timed again, the shapes no design of the grid asks for among them, and replaces its old
    row; the other families are kept as they were; a family whose key cannot be measured again
    entry by entry (decode attention) is refused by name."""
    from kernels.switches import Switches
    from sweep.measure import calibration_run as run_cal

    specs = []

    def fake_run(spec, out, timeout_s, on_line=None, keep_log=None):
        specs.append(spec)
        pd.DataFrame([dict(kind="gemv", M=m, N=n, K=k, prologue=p, dtype="bf16", time_s=2e-6)
                      for m, n, k, p in spec["gemv"]]).to_parquet(out)
        return 0, ""

    table = pd.DataFrame([dict(kind="gemv", M=1, N=n, K=64, prologue="none", dtype="bf16",
                               family="gemv", time_s=1e-6) for n in (64, 96)]
                         + [dict(kind="gemm", M=8, N=64, K=64, dtype="bf16", family="gemm",
                                 time_s=5e-6)])
    have = store.Calibration({"version": cal.VERSION, "fingerprints": {}}, table)
    monkeypatch.setattr(run_cal, "run", fake_run)
    monkeypatch.setattr(cal, "needs", lambda items, device_type: {})
    monkeypatch.setattr(cal, "attn_grid", lambda *a, **k: [])
    monkeypatch.setattr(cal, "load", lambda *a, **k: have)
    monkeypatch.setattr(cal, "stale_families", lambda meta, current: [])
    dev = {"type": "cpu", "name": "cpu"}
    assert cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True).meta["measured_now"] == 0
    got = cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True, again=("gemv",)).table
    assert sorted(tuple(g[:3]) for g in specs[-1]["gemv"]) == [(1, 64, 64), (1, 96, 64)]
    gemv = got[got.kind == "gemv"]
    assert sorted(gemv.N) == [64, 96] and (gemv.time_s == 2e-6).all()  # replaced, not doubled
    assert got[got.kind == "gemm"].time_s.tolist() == [5e-6]
    with pytest.raises(ValueError, match="decode_attn/triton"):
        cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True, again=("decode_attn/triton",))


def test_calibration_entries_measured_beside_another_job_are_measured_again(tmp_path,
                                                                            monkeypatch):
    """Entries measured while another job used the device are used and kept, flagged
    ``contended``, and measured again by the next study that finds the device free (a busy
    CPU's calibration read every later study's predictions 247% off); while it is still busy,
    kept as they are."""
    from kernels.switches import Switches
    from sweep.measure import calibration_run as run_cal
    from sweep.measure import contention

    runs = []

    def fake_run(spec, out, timeout_s, on_line=None, keep_log=None):
        runs.append(spec)
        pd.DataFrame([dict(kind=g, op="rmsnorm" if g == "elementwise" else "graph_kernel",
                           impl="torch" if g == "elementwise" else None, time_s=1e-6,
                           time_s_min=1e-6, time_s_p90=1e-6) for g in spec["base"]]
                     ).to_parquet(out)
        return 0, ""

    busy = ["2.0 of 2 cores busy with other processes"]
    monkeypatch.setattr(run_cal, "run", fake_run)
    monkeypatch.setattr(contention, "sample", lambda device: busy[0])
    monkeypatch.setattr(contention, "during", lambda start: "")
    monkeypatch.setattr(cal, "needs", lambda items, device_type: {})
    monkeypatch.setattr(cal, "attn_grid", lambda *a, **k: [])
    dev, lines = {"type": "cpu", "name": "cpu"}, []
    first = cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True, log=lines.append,
                       from_shipped=False)
    assert len(runs) == 1 and first.table[CONTENDED].all()
    assert any("used now, measured again when it is free" in m for m in lines), lines
    cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True, log=lines.append)
    assert len(runs) == 1  # still busy: kept
    busy[0] = ""
    again = cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True, log=lines.append)
    assert len(runs) == 2 and not again.table[CONTENDED].any()
    assert len(again.table) == len(first.table)  # replaced, not doubled
    assert any("used the device: those this study needs are measured again" in m
               for m in lines), lines
    cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True, log=lines.append)
    assert len(runs) == 2


def test_contended_entries_a_study_does_not_need_are_kept(tmp_path, monkeypatch):
    """Finding the device free, a study measures again only the contended entries it needs:
    the others stay, still flagged (a later study that needs them measures them), and none is
    doubled; each measured-again entry replaces its contended row."""
    from kernels.switches import Switches
    from sweep.measure import calibration_run as run_cal
    from sweep.measure import contention

    runs = []

    def fake_run(spec, out, timeout_s, on_line=None, keep_log=None):
        runs.append(spec)
        rows = [dict(kind="gemm", M=m, N=n, K=k, dtype="fp32", time_s=1e-6, time_s_min=1e-6,
                     time_s_p90=1e-6) for m, n, k in spec["gemm"]]
        rows += [dict(kind=g, op="rmsnorm" if g == "elementwise" else "graph_kernel",
                      impl="torch" if g == "elementwise" else None, time_s=1e-6)
                 for g in spec["base"]]
        pd.DataFrame(rows).to_parquet(out)
        return 0, ""

    a, b = (8, 64, 64, "fp32"), (8, 128, 64, "fp32")
    want = [{"gemm": [a, b]}]
    busy = ["2.0 of 2 cores busy with other processes"]
    monkeypatch.setattr(run_cal, "run", fake_run)
    monkeypatch.setattr(contention, "sample", lambda device: busy[0])
    monkeypatch.setattr(contention, "during", lambda start: "")
    monkeypatch.setattr(cal, "needs", lambda items, device_type: want[0])
    monkeypatch.setattr(cal, "attn_grid", lambda *a, **k: [])
    dev = {"type": "cpu", "name": "cpu"}
    first = cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True, from_shipped=False)
    assert first.table[CONTENDED].all() and (first.table.kind == "gemm").sum() == 2
    busy[0], want[0] = "", {"gemm": [a]}
    got = cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True).table
    assert [list(map(int, g)) for g in runs[-1]["gemm"]] == [list(a[:3])]
    gemm = got[got.kind == "gemm"].set_index("N")[CONTENDED]
    assert gemm.to_dict() == {64: False, 128: True}  # a measured again, b kept, none doubled
    again = cal.ensure(dev, [], Switches(), cal_dir=tmp_path, quick=True)
    assert len(runs) == 2  # a clean now, b not needed: nothing measured
    assert len(again.table) == len(got)


def test_the_device_locks_folder_is_shared_whatever_the_umask(tmp_path, monkeypatch):
    """Every user's studies on a machine meet at one lock per device: the folder is world
    writable with the sticky bit even under a umask of 022 (it came out 1755 before)."""
    import os
    import tempfile

    from sweep.common.locks import device_lock_path

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = os.umask(0o022)
    try:
        path = device_lock_path({"type": "cpu"})
    finally:
        os.umask(old)
    assert path.parent.stat().st_mode & 0o7777 == 0o1777 and path.name == "cpu.lock"


def test_the_shipped_grid_holds_an_moe_decode_step_at_every_batch():
    """The shipped grid (``python -m sweep.cli.calibrate``) measures an MoE design's grouped
    GEMMs at every ``MOE_DECODE_TOKENS`` batch, as the model launches them there (the fused
    router only up to its 8 tokens): the H100's file had Qwen3-30B-A3B at 1 and 512 tokens only,
    and a predict-only batch 8 read 13% slow. The H100's shipped file holds them."""
    import pandas as pd

    from sweep.analysis.needs import missing
    from sweep.caches.grids import MOE_DECODE_TOKENS, grid_needs
    from zoo import ModelConfig

    cfg = ModelConfig.from_name("qwen3_30b_a3b").resolved("cuda")
    got = grid_needs([(cfg, {"batch": 1, "prompt_len": 512, "new_tokens": 64}, "cudagraph")],
                     "cuda")["moe_gemm"]
    assert {(op, M) for op, M, *_ in got} >= {(op, M) for op in ("moe_up", "moe_down")
                                              for M in MOE_DECODE_TOKENS}
    assert max(M for op, M, *_ in got if op == "router_route") <= 8
    shipped = pd.read_parquet("sweep/analysis/calibrations/nvidia_h100_80gb_hbm3.parquet")
    assert not missing(shipped, {"moe_gemm": got})["moe_gemm"]


def test_an_interrupted_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path):
    # write_atomic left .NAME.PID.tmp behind when the write raised
    from sweep.common.atomic import write_atomic, write_text

    target = write_text(tmp_path / "t.csv", "old")

    def half(p):
        p.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, half)
    assert target.read_text() == "old" and [f.name for f in tmp_path.iterdir()] == ["t.csv"]


def test_a_failed_atomic_write_names_the_target_not_its_temporary(tmp_path):
    # --out /proc/x said: [Errno 2] ... '/proc/.x.20383.tmp'
    from sweep.common.atomic import write_text

    with pytest.raises(OSError, match=r"cannot write /proc/x \(") as e:
        write_text("/proc/x", "text")
    assert ".tmp" not in str(e.value)
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(OSError, match=f"cannot write {blocked}/out.csv"):
        write_text(blocked / "out.csv", "x")  # its folder is a file


def test_a_register_capped_tile_choice_is_kept_capped():
    import triton

    from kernels import tuning

    capped = triton.Config({"BLOCK_N": 64}, num_warps=4, num_stages=3, maxnreg=80)
    plain = triton.Config({"BLOCK_N": 64}, num_warps=4, num_stages=3)
    assert tuning.config_dict(capped) == {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3,
                                          "maxnreg": 80}
    assert tuning.config_dict(plain) == {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3}

    class Tuner:  # a Triton autotuner's last tuning: the capped config the faster
        best_config = capped
        configs_timings = {plain: [2.0], capped: [1.0]}

    assert tuning.ranked(Tuner) == (tuning.config_dict(capped), [tuning.config_dict(plain)])


def test_a_launch_group_cut_before_its_graph_gap_measures_the_gap():
    """A GPU table whose launch group lacks ``graph_gap`` (its run's last step, cut off by the
    timeout: the H100's shipped table lost it so) asks for that entry alone; a whole group, a
    CPU table (no graph gap there) or a dropped launch family ask for the group as before."""
    launch = [{"kind": "launch", "op": op, "family": "launch", "time_s": 1e-6}
              for op in ("graph", "graph_kernel", "eager_op")]
    elem = [{"kind": "elementwise", "op": "rmsnorm", "family": "elementwise/torch",
             "time_s": 1e-6}, {"kind": "elementwise", "op": "rmsnorm",
                               "family": "elementwise/triton", "time_s": 1e-6}]
    cut = pd.DataFrame(launch + elem)
    whole = pd.DataFrame(launch + elem + [dict(launch[0], op="graph_gap")])
    assert cal.groups(cut, [], "cuda")[1] == ["graph_gap"]
    assert cal.groups(whole, [], "cuda")[1] == []
    assert cal.groups(cut, [], "cpu")[1] == []
    table, base = cal.groups(cut, ["launch"], "cuda")
    assert base == ["launch"] and not (table.family == "launch").any()
    assert cal.groups(None, [], "cuda") == (None, ["launch", "elementwise"])


def test_the_needs_ask_no_gemm_the_micro_benchmark_never_measures(monkeypatch):
    """A prefill GEMM whose input passes the micro-benchmark's bound (``M * max(N, K) * 2`` bytes:
    2**31 on a GPU, 2**26 on the CPU) is never measured: before, every run asked for it again
    (``sweep.cli.calibrate``: 24 such keys each time). The needs leave it out; the entries the
    micro-benchmark measures stay, and so does the same GEMM at a size it measures."""
    from sweep.analysis.needs import GEMM_INPUT_BYTES_MOST, needs
    from sweep.measure import microbench
    from zoo import ModelConfig

    cfg = ModelConfig.from_name("llama3_2_1b")
    big = needs([(cfg, {"batch": 64, "prompt_len": 4096, "new_tokens": 8}, "cudagraph")], "cuda")
    small = needs([(cfg, {"batch": 4, "prompt_len": 4096, "new_tokens": 8}, "cudagraph")], "cuda")
    assert small["gemm"] and all(m * max(n, k) * 2 <= 2**31 for m, n, k, _ in small["gemm"])
    assert (16384, 16384, 2048, "bf16") in small["gemm"]
    assert all(m * max(n, k) * 2 <= 2**31 for m, n, k, _ in big["gemm"])
    assert (262144, 2048, 2048, "bf16") in big["gemm"]  # 262144 rows: the narrow ones asked,
    assert (262144, 16384, 2048, "bf16") not in big["gemm"]  # the FFN's w13 not (8.6 GB)
    assert (64, 128256, 2048, "bf16") in big["gemm"]  # the decode's LM head still is
    assert GEMM_INPUT_BYTES_MOST == {"cuda": 2**31, "cpu": 2**26}
    # the micro-benchmark's own copy of the bound is the same: what it skips is what is not asked
    shapes = [(262144, 16384, 2048), (16384, 16384, 2048), (64, 512, 512)]
    timed = []
    rows = microbench.gemms(shapes, False, lambda fns, n=1, duty=False: timed.append(1) or {
        "median": 1.0, "min": 1.0, "p90": 1.0}, lambda *s: None, "fp32")
    assert [(r["M"], r["N"], r["K"]) for r in rows] == [(64, 512, 512)] and len(timed) == 1
    cpu = needs([(ModelConfig.from_name("tiny"), {"batch": 2, "prompt_len": 64, "new_tokens": 8},
                  "eager")], "cpu")["gemm"]
    assert cpu and all(m * max(n, k) * 2 <= 2**26 for m, n, k, _ in cpu)


def test_the_shipped_grid_asks_no_gemm_the_micro_benchmark_never_measures():
    """``sweep.cli.calibrate``'s grid (``caches.grids.grid_needs``) over the shipped designs asked
    for 22 LM-head and FFN GEMMs at 16384 and 32768 rows whose inputs pass the micro-benchmark's
    bound: measured never, asked on every run (the thirty-fifth session's reship: "measuring 22
    entries ... 0 measured now"). The grid keeps the same GEMMs at the sizes it measures, and
    the H100's shipped calibration holds every key the grid asks."""
    from pathlib import Path

    from sweep.analysis import calibration_store as store
    from sweep.analysis.needs import gemm_measured, missing
    from sweep.caches.grids import M_GRID, grid_needs
    from sweep.space import shipped_items

    grid = grid_needs(shipped_items(cpu=False), "cuda")
    assert grid["gemm"] and all(gemm_measured(m, n, k, "cuda") for m, n, k, _ in grid["gemm"])
    assert (32768, 128256, 2048, "bf16") not in grid["gemm"]  # 8.4 GB of input: never timed
    assert (4096, 128256, 2048, "bf16") in grid["gemm"]  # the same LM head within the bound
    assert max(M_GRID) == 32768 and (32768, 2048, 2048, "bf16") in grid["gemm"]
    shipped = store.load("", where=Path("sweep/analysis/calibrations/nvidia_h100_80gb_hbm3.json"))
    assert not any(missing(shipped.table, grid).values())
