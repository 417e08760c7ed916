"""Bad input and bad state answered before any work, and no row measured on a shared device
unflagged: impossible designs refused by name (exit 2, no study created), a design that cannot
fit refused naming its bytes, an all-failed study exiting non-zero, two studies at once on one
device never measuring together, a two-target CPU study writing its report."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests import helpers
from tests.helpers import tiny_overrides

REPO = Path(__file__).resolve().parent.parent
# as a user runs it: no Triton interpreter (the suite's conftest sets it for the kernel tests)
ENV = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(REPO)}


def sweep_cli(tmp_path, *over, timeout=300):
    return helpers.sweep_cli(tmp_path, *over, timeout=timeout, env=ENV)


@pytest.mark.parametrize("override,message", [
    ("mode=turbo", "mode='turbo' is not one of auto, eager, cudagraph, compile"),
    ("mode=cudagraph", "mode=cudagraph needs a CUDA GPU"),
    ("model.kv_dtype=int8", "kernels=triton needs a CUDA GPU"),
    ("model.tie_embeddings=maybe", "tie_embeddings must be true or false"),
    ("cpu.predict_on=[nosuch_gpu]", "cpu.predict_on: unknown hardware spec 'nosuch_gpu'"),
    # under study.predict=true too (it ran, exit 0, the misspelled GPU silently unused)
    ("study.predict=true hardware=h100_sxm cpu.predict_on=[h1000]",
     "cpu.predict_on: unknown hardware spec 'h1000'"),
])
def test_an_impossible_design_is_refused_before_a_study_exists(tmp_path, override, message):
    r = sweep_cli(tmp_path, *override.split())
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "optuna.db").exists()  # no study was created


def test_a_design_that_cannot_fit_is_refused_naming_its_bytes(tmp_path):
    t0 = time.time()
    r = sweep_cli(tmp_path, "model.n_layers=100000")
    assert time.time() - t0 < 10
    assert r.returncode == 2, r.stderr
    assert "the design needs" in r.stderr and "GB (weights" in r.stderr, r.stderr
    assert not (tmp_path / "optuna.db").exists()


def test_bad_input_is_answered_before_torch_loads(tmp_path):
    """The checks of ``sweep.plan`` need no torch, pandas or storage: a design that cannot fit
    and a mode that does not exist are refused with torch, triton and pandas never imported
    (their import was most of the 6.7 s an H100 host took to refuse a 2.1 TB design)."""
    code = ("import runpy, sys\n"
            "try:\n    runpy.run_module('sweep', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as e:\n"
            "    print('exit', e.code, sorted(m for m in ('torch', 'triton', 'pandas') "
            "if m in sys.modules))\n")
    for bad in ("model.n_layers=100000", "mode=turbo"):
        r = subprocess.run([sys.executable, "-c", code, *tiny_overrides(tmp_path, bad)],
                           cwd=REPO, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert r.stdout.strip().splitlines()[-1] == "exit 2 []", (bad, r.stdout, r.stderr)
        assert r.stderr.startswith("error: "), r.stderr


@pytest.mark.slow
def test_a_study_whose_every_design_failed_exits_non_zero(tmp_path):
    r = sweep_cli(tmp_path, "fault=measure:raise")
    assert r.returncode == 1, r.stderr
    assert "no design of the study completed (1 FAIL)" in r.stderr, r.stderr


@pytest.mark.slow
def test_a_cpu_study_pricing_two_gpus_writes_its_report(tmp_path):
    r = sweep_cli(tmp_path, "cpu.predict_on=[h100_sxm,h200]")
    assert r.returncode == 0, r.stderr
    study = next(p for p in tmp_path.iterdir() if (p / "study.json").exists())
    page = (study / "report.html").read_text()
    assert {p.name for p in study.glob("predicted_*.csv")} == {"predicted_h100_sxm.csv",
                                                                "predicted_h200.csv"}
    # the study's answer, first: the real designs priced on both GPUs
    assert page.index("The real designs, predicted") < page.index("Pareto front")
    assert "h100_sxm (" in page and "h200 (" in page
    # a figure the CPU does not measure (peak_mem_bytes, J/token) reads n/a, never None
    assert ">None<" not in page and ">n/a</span>" in page


def test_a_report_table_writes_a_missing_figure_as_n_a_and_rates_alike():
    import pandas as pd

    from sweep.report.html_report import _frame

    cells = _frame(pd.DataFrame({"decode_tok_s": [3151.2, 75470.0],
                                 "peak_mem_bytes": pd.Series([None, None], dtype=object),
                                 "fail_reason": [None, "oom"]}))
    assert "None" not in cells and cells.count(">n/a</span>") == 2
    assert cells.count('<span title="not measured here') == 2  # the hint a well-formed attribute
    assert "3,151" in cells and "75,470" in cells and "e+04" not in cells


@pytest.mark.slow
def test_two_studies_at_once_never_measure_together(tmp_path):
    """Two studies of the same device in two results folders, started together: their
    measurements take turns on the device's lock (``measure_start`` .. ``measure_end`` never
    overlap), and each row says whether another process shared the device then."""
    procs = []
    for name in ("a", "b"):
        over = tiny_overrides(tmp_path / name, "+experiment=gqa_vs_mha")
        procs.append(subprocess.Popen([sys.executable, "-m", "sweep", *over], cwd=REPO,
                                      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = [p.communicate(timeout=400)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    spans = []
    for name in ("a", "b"):
        csv = next((tmp_path / name).glob("*/trials.csv"))
        df = pd.read_csv(csv)
        done = df[df.state == "COMPLETE"]
        assert len(done) == 4 and done["contended"].isin([True, False]).all()
        spans += [(name, pd.Timestamp(s), pd.Timestamp(e))
                  for s, e in zip(done.measure_start, done.measure_end)]
    spans.sort(key=lambda s: s[1])
    for (_, _, end), (_, start, _) in zip(spans, spans[1:]):
        assert start >= end, spans  # one measurement on the device at a time
