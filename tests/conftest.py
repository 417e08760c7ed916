import os

import pytest
import torch

# CPU tests run Triton kernels in the interpreter (set before triton is imported anywhere).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


_WORKER_TMP = [None]  # this xdist worker's temporary folder, removed when it ends


def _xdist_worker_alone() -> None:
    """Under ``pytest -n N`` (pytest-xdist) on a machine without a GPU: give this worker its
    own share of the cores (``sched_setaffinity``, inherited by every study, trial child and
    calibration it starts: ``sweep.common.env.cpu_threads`` reads it) and its own temporary
    folder (``TMPDIR``: the machine-wide device locks of ``sweep.common.locks`` live there), so
    the workers' tests run side by side instead of queueing on one CPU lock. Within a worker the
    lock still serializes its processes (the tests of two studies at once run both in one
    worker). Rows measured while the other worker runs are flagged ``contended``, as they
    should be; no test judges a figure across workers."""
    import tempfile

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or torch.cuda.is_available():
        return
    i, n = int(worker[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        share = cores[i % len(cores)::n] or cores
        os.sched_setaffinity(0, share)
        torch.set_num_threads(len(share))
    tmp = os.path.join(tempfile.gettempdir(), f"designzoo-tests-{os.getppid()}-{worker}")
    os.makedirs(tmp, exist_ok=True)
    os.environ["TMPDIR"] = _WORKER_TMP[0] = tmp
    tempfile.tempdir = None


_xdist_worker_alone()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: spawns measurement child processes")


def pytest_unconfigure(config):
    """A worker's own temporary folder (``_xdist_worker_alone``) goes with it."""
    import shutil
    import tempfile

    if _WORKER_TMP[0]:
        shutil.rmtree(_WORKER_TMP[0], ignore_errors=True)
        tempfile.tempdir = None


# calls in a test's own code that start processes: a study's trial children, the CLI, a worker
STARTS_CHILDREN = ("run_tiny(", "sweep_cli(", "subprocess.", "Popen(", "_start_hanging_study(",
                   "run_child(", "check_output(")


def pytest_collection_modifyitems(config, items):
    """A test whose code starts processes (``STARTS_CHILDREN``) is marked ``slow`` whether or
    not its module says so: ``-m "not slow"`` is the in-process lane. Without a GPU, ``gpu``
    tests are skipped."""
    import inspect

    for item in items:
        if "measured_study" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)  # the shared study is measured by children
            continue
        try:
            src = inspect.getsource(item.function)
        except (AttributeError, OSError, TypeError):
            continue
        if any(s in src for s in STARTS_CHILDREN):
            item.add_marker(pytest.mark.slow)
    _longest_first(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# the one test that runs for minutes (every README command in turn): started first
LONGEST = "tests/test_readme.py::test_every_readme_command_runs_on_the_cpu"


def _longest_first(items) -> None:
    """Order the run so the long work starts first and the short fills the end (longest
    processing time first, for ``-n 2`` with ``--dist worksteal``: an idle worker takes half of
    the other's queue, so a minutes-long test started last would hold one core alone at the
    end): ``LONGEST``, then the modules by their share of ``slow`` tests (a child-process study
    each) and Triton-interpreter tests (``tests/kernels``), each module's tests kept together in
    their order (module fixtures are set up once)."""
    weight: dict = {}
    for item in items:
        mod = item.nodeid.split("::")[0]
        w = 1.0 if "slow" in item.keywords else 0.25 if mod.startswith("tests/kernels/") else 0.0
        weight[mod] = weight.get(mod, 0.0) + w
    order = {m: i for i, m in enumerate(dict.fromkeys(it.nodeid.split("::")[0] for it in items))}
    items.sort(key=lambda it: (it.nodeid != LONGEST, -weight[it.nodeid.split("::")[0]],
                               order[it.nodeid.split("::")[0]]))


@pytest.fixture(scope="session", autouse=True)
def shared_device_cache(tmp_path_factory):
    """The tests' studies share one folder of device caches (``tests.helpers.CACHE``): the CPU
    is calibrated once per session. A test about calibrating sets its own ``cal_dir``."""
    from tests import helpers

    helpers.CACHE = tmp_path_factory.mktemp("device-cache")
    yield helpers.CACHE
    helpers.CACHE = None


@pytest.fixture(scope="session")
def measured_study(tmp_path_factory, shared_device_cache):
    """One completed tiny study, ``+experiment=gqa_vs_mha`` (4 designs, ``tests.helpers.run_tiny``),
    measured once per test run and shared by the xdist workers (a file lock in the run's common
    temporary folder: the first worker to ask measures it, the others read it): ``(plan, study,
    df)``. Its readers (report pages, predicted columns, what-if, fronts) write nowhere inside
    ``plan.results``."""
    import optuna
    import pandas as pd
    from filelock import FileLock

    from sweep.plan import plan_from_config
    from tests.helpers import compose_cfg, run_tiny, tiny_overrides

    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    folder, over = root / "measured-study", ("+experiment=gqa_vs_mha",)
    with FileLock(str(root / "measured-study.lock")):
        if not (folder / "done").exists():
            plan, study, df = run_tiny(folder, *over)
            (folder / "done").write_text(plan.name)
            return plan, study, df
    plan = plan_from_config(compose_cfg(tiny_overrides(folder, *over)))
    study = optuna.load_study(study_name=plan.name, storage=plan.storage)
    return plan, study, pd.read_parquet(plan.results / "trials.parquet")


def project_processes(under: str) -> list[tuple[int, str]]:
    """``(pid, cmdline)`` of live ``sweep.measure.trial`` / ``sweep.worker`` processes whose command line
    names a path under ``under`` (a test's folder), zombies excluded. A trial child forked by a
    fork server (``sweep.measure.forkserver``) has the server's command line: it is found by the
    spec file it holds open, its paths under ``under`` appended to the command line shown."""
    import pathlib

    out = []
    for d in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if "sweep.measure.forkserver" in cmd:
                held = [os.readlink(f) for f in (d / "fd").iterdir()]
                cmd += " " + " ".join(h for h in held if h.startswith(under))
        except OSError:
            continue
        if state != "Z" and under in cmd and any(
                m in cmd for m in ("sweep.measure.trial", "sweep.worker", "sweep.measure.forkserver")):
            out.append((int(d.name), cmd.strip()))
    return out


@pytest.fixture(autouse=True)
def no_process_left_behind(request):
    """Every test: no ``sweep.measure.trial`` or ``sweep.worker`` process started under its folder
    survives it (a trial child dies with its parent). Leftovers are killed, and the test fails."""
    import signal
    import sys
    import time

    if "tmp_path" not in request.fixturenames or not sys.platform.startswith("linux"):
        yield
        return
    under = str(request.getfixturevalue("tmp_path"))
    yield
    deadline = time.time() + 5
    while (left := project_processes(under)) and time.time() < deadline:
        time.sleep(0.2)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes of the project left behind: {left}"


@pytest.fixture(scope="module")
def device_free():
    """Another job's use of the device not sampled (``sweep.measure.contention.sample`` and
    ``during`` say none) for a module whose calibrations judge what is measured, cached and
    measured again:
    under ``pytest -n 2`` the other worker's load would flag entries ``contended`` and a later
    ensure measure them again when it finds the device free (tested on its own in
    ``tests/test_caches.py``)."""
    from sweep.measure import contention

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(contention, "sample", lambda device: "")
        mp.setattr(contention, "during", lambda start: "")
        yield
