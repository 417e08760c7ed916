"""Ctrl-C and SIGTERM inside a study's process (``sweep.common.interrupts``): raised only where no
storage operation can be cut, never lost. The whole study stopped by a signal, with one worker
and two: tests/test_trust.py."""

import signal
import subprocess
import sys
import threading
import time

import optuna
import pytest
from optuna.trial import TrialState

from sweep.common import interrupts
from sweep.measure import child

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture(autouse=True)
def _no_held_signal():
    """Each test starts and ends with no signal held and none deferred."""
    interrupts._DEFERRED[:] = [False, None]
    yield
    assert interrupts._DEFERRED == [False, None]


def test_an_interrupt_swallowed_while_a_child_starts_still_ends_it(tmp_path, monkeypatch):
    """A signal that lands while ``subprocess.Popen`` forks is raised in an at-fork hook and only
    printed (seen: a study waiting forever on its hanging trial after SIGINT): the handler counts
    it, and ``start`` raises it once the fork returns, the child killed."""
    with pytest.raises(KeyboardInterrupt):
        interrupts.interrupt_handler(signal.SIGTERM, None)
    started, popen = [], subprocess.Popen

    def popen_interrupted(*a, **kw):  # the handler ran inside the fork, its exception swallowed
        started.append(popen(*a, **kw))
        interrupts._INTERRUPTS[0] += 1
        return started[-1]

    monkeypatch.setattr(child.subprocess, "Popen", popen_interrupted)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        child.start(SLEEPER, tmp_path / "log.txt")
    assert started and started[0].poll() is not None  # killed, not left running


def test_an_interrupt_swallowed_while_waiting_on_a_child_still_ends_it(tmp_path, monkeypatch):
    """A signal whose exception Python swallowed in one of its own callbacks (a garbage
    collector's) while a trial waits on its child: the wait raises it within a second and kills
    the child, instead of waiting out the trial's time limit."""
    c = child.start(SLEEPER, tmp_path / "log.txt")
    waiting, count = threading.Event(), child.interrupt_count

    def count_then_say():  # the wait has taken its count: a signal from now on is its own
        n = count()
        waiting.set()
        return n

    monkeypatch.setattr(child, "interrupt_count", count_then_say)

    def swallowed():  # what the handler leaves when its exception never arrives
        waiting.wait(30)
        interrupts._INTERRUPTS[0] += 1
        interrupts._INTERRUPTS[1] = "signal SIGTERM"

    threading.Thread(target=swallowed, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        c.wait(30)
    assert time.monotonic() - t0 < 5
    assert c.poll() is not None  # killed, not left running


def test_a_wait_past_its_deadline_still_returns_the_code_of_a_child_that_exited(tmp_path):
    """``Child.wait(0)`` on a child that has exited returns its code; it is not killed as past
    its time (``sweep.worker.stop_workers`` reaches later workers with no time left)."""
    c = child.start([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "log.txt")
    while c.poll() is None:
        time.sleep(0.05)
    assert c.wait(0) == 3
    running = child.start(SLEEPER, tmp_path / "log2.txt")
    with pytest.raises(child.ChildTimeout):
        running.wait(0)
    assert running.poll() is not None


def test_a_signal_inside_a_storage_write_is_raised_at_the_childs_wait(tmp_path):
    """A SIGTERM landing inside a trial's write to the study's storage is held: the write ends
    whole (seen on CI: an exception cut into SQLAlchemy left this process's SQLite write lock
    held, and the interrupted trial's own record then waited out the 60 s busy timeout). It is
    raised when the trial waits on its child process, which is killed; the objective records the
    interrupted trial and queues its design again, and nothing is left RUNNING."""
    from sweep.runs import run_trials

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db",
                                         engine_kwargs={"connect_args": {"timeout": 2}})
    study = optuna.create_study(storage=storage, study_name="s")
    study.enqueue_trial({"x": 1.0})
    write, seen = study._storage.set_trial_user_attr, []

    def write_signalled(trial_id, key, value):
        if key == "worker_pid":
            interrupts.interrupt_handler(signal.SIGTERM, None)  # lands inside the write
        return write(trial_id, key, value)

    study._storage.set_trial_user_attr = write_signalled

    def objective(trial):
        try:
            x = trial.suggest_float("x", 0, 2)
            trial.set_user_attr("worker_pid", 1)
            seen.append("written")
            t0 = time.monotonic()
            try:
                child.launch(SLEEPER, tmp_path / "log.txt", timeout_s=60)
            finally:
                seen.append(time.monotonic() - t0)
            return x
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", True)
            study.enqueue_trial(trial.params)
            raise

    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        run_trials(study, objective, grid=None, target=1)
    assert seen[0] == "written" and seen[1] < 5  # raised on the wait's entry, not after 60 s
    trials = study.trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs == {"worker_pid": 1, "interrupted": True}


def test_a_signal_while_waiting_for_a_lock_is_raised_at_once(tmp_path):
    """Inside a trial's turn (signals held), a wait for the device or a cache lock that another
    process holds is a wait like a child's: a SIGTERM ends it at once."""
    from sweep.common.locks import cache_lock

    path = tmp_path / "cache.json"
    holder = child.start([sys.executable, "-c", "import sys, time; from filelock import FileLock; "
                          f"l = FileLock({str(path) + '.lock'!r}); l.acquire(); "
                          "print('held', flush=True); time.sleep(60)"], tmp_path / "holder.log")
    try:
        deadline = time.time() + 30
        while "held" not in (tmp_path / "holder.log").read_text():
            assert time.time() < deadline
            time.sleep(0.05)
        old = signal.signal(signal.SIGALRM, interrupts.interrupt_handler)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        t0 = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt, match="SIGALRM"):
                with interrupts.deferred_interrupts(), cache_lock(path, "a test", log=lambda m: 0):
                    pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert time.monotonic() - t0 < 5
    finally:
        holder.kill()


def test_a_held_signal_never_outlives_its_block():
    """A signal held when the outermost block ends by an exception is let go (the study is
    ending already), not left to strike the next wait; a second signal whose exception is
    swallowed leaves the first held, raised when the block ends."""
    with pytest.raises(ValueError):
        with interrupts.deferred_interrupts():
            interrupts.interrupt_handler(signal.SIGINT, None)
            raise ValueError("the turn ended by an error")
    assert interrupts._DEFERRED == [False, None]
    with interrupts.interrupts_allowed():
        pass  # nothing held: nothing raised
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with interrupts.deferred_interrupts():
            interrupts.interrupt_handler(signal.SIGTERM, None)
            try:
                interrupts.interrupt_handler(signal.SIGTERM, None)  # raised at once...
            except KeyboardInterrupt:
                pass  # ...and swallowed
            assert interrupts._DEFERRED[1] == "signal SIGTERM"  # the first is still held


def test_a_signal_inside_optunas_ask_leaves_no_trial_running(tmp_path):
    """A SIGTERM landing inside ``study.ask`` (the queued trial already RUNNING, the objective not
    yet started) is held until the objective waits on a child, which records it and queues the
    design again; no trial is left RUNNING with no worker (seen on CI: a design held by such a
    trial was lost). A second signal while one is held is raised at once."""
    study = optuna.create_study()
    study.enqueue_trial({"x": 1.0})
    ask, seen = study.ask, []

    def ask_then_signal(*a, **kw):
        trial = ask(*a, **kw)
        interrupts.interrupt_handler(signal.SIGTERM, None)  # lands before the objective starts
        return trial

    def objective(trial):
        try:
            seen.append("ran")
            child.launch(SLEEPER, tmp_path / "log.txt", timeout_s=60)
            return trial.suggest_float("x", 0, 2)
        except KeyboardInterrupt:
            seen.append("recorded")
            study.enqueue_trial(trial.params or {"x": 1.0})
            raise

    study.ask = ask_then_signal
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with interrupts.deferred_interrupts():
            study.optimize(objective, n_trials=1)
    assert seen == ["ran", "recorded"]  # raised on the wait's entry
    states = [t.state for t in study.trials]
    assert states == [TrialState.FAIL, TrialState.WAITING]
    with pytest.raises(KeyboardInterrupt):  # two signals: the second is not held
        with interrupts.deferred_interrupts():
            interrupts.interrupt_handler(signal.SIGINT, None)
            interrupts.interrupt_handler(signal.SIGINT, None)


def test_a_predicted_grid_is_stopped_after_the_running_trial_is_told(tmp_path):
    """A predict-only grid (``run_predicted``): a signal landing inside a trial is held until
    Optuna has told the trial (a finished prediction kept), then raised; no trial is left
    RUNNING and the grid's other designs stay queued."""
    from sweep.runs import run_predicted

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db")
    study = optuna.create_study(storage=storage, study_name="s")
    grid = {"x": [1.0, 2.0, 3.0]}

    def objective(trial):
        x = trial.suggest_categorical("x", grid["x"])
        if trial.number == 0:
            interrupts.interrupt_handler(signal.SIGTERM, None)
        return x

    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        run_predicted(study, objective, grid, target=3)
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.WAITING, TrialState.WAITING]


def test_a_sampled_predicted_study_keeps_the_trial_running_at_the_signal(tmp_path):
    """A predict-only study with a sampler (``run_predicted`` on an in-memory copy): the trial
    running at a SIGTERM is finished and flushed with the others, not kept as a FAIL (one had
    held its design on resume: ``storage.duplicate_of``)."""
    from sweep.runs import run_predicted

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db")
    study = optuna.create_study(storage=storage, study_name="s")

    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        if trial.number == 3:
            interrupts.interrupt_handler(signal.SIGTERM, None)
        return x

    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        run_predicted(study, objective, None, target=10, every=2)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4


@pytest.mark.slow
def test_sigterm_while_the_calibration_is_measured_ends_the_study_with_its_line(tmp_path):
    # the handler was installed around the trial loop only: a SIGTERM while the calibration was
    # measured killed the process with no line (rc -15), the child's spec and log left behind
    import os
    from pathlib import Path

    from tests.helpers import tiny_overrides

    repo = Path(__file__).resolve().parent.parent
    cache = tmp_path / "cache"
    over = [o for o in tiny_overrides(tmp_path) if not o.startswith("cache_dir=")]
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *over, f"cache_dir={cache}"],
                            cwd=repo, env=dict(os.environ, PYTHONPATH=str(repo)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(cache.glob("calibration/*.spec.json")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    else:
        assert list(cache.glob("calibration/*.spec.json")), "the calibration never started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    assert "interrupted (signal SIGTERM)" in err
    assert not [p.name for p in cache.glob("calibration/.*") if p.name.endswith((".spec.json",
                                                                                  ".log"))]
