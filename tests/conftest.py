import os

import pytest
import torch

# CPU tests run Triton kernels in the interpreter (set before triton is imported anywhere).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: spawns measurement child processes")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def shared_device_cache(tmp_path_factory):
    """The tests' studies share one folder of device caches (``tests.helpers.CACHE``): the CPU
    is calibrated once per session. A test about calibrating sets its own ``cal_dir``."""
    from tests import helpers

    helpers.CACHE = tmp_path_factory.mktemp("device-cache")
    yield helpers.CACHE
    helpers.CACHE = None


def project_processes(under: str) -> list[tuple[int, str]]:
    """``(pid, cmdline)`` of live ``sweep.measure.trial`` / ``sweep.worker`` processes whose command line
    names a path under ``under`` (a test's folder), zombies excluded."""
    import pathlib

    out = []
    for d in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and under in cmd and ("sweep.measure.trial" in cmd or "sweep.worker" in cmd):
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
