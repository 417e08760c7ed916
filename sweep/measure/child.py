"""The measurement child: run ``python -m sweep.measure.trial SPEC RESULT`` in a process of its own.

The child process is the unit of isolation (an OOM, a CUDA error, a crash or a profiler wrapper
touches one trial only). Every profiler that needs another run of the trial (``ncu``, ``nsys``,
``torch.profiler``) goes through ``run_child`` too, with its own spec and folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..common.atomic import write_json
from ..common.env import REPO
from ..common.interrupts import interrupt_count, interrupts_allowed, raise_if_swallowed
from . import forked
from .parent import PARENT_PID, die_with_parent


def child_env() -> dict:
    """This process's environment with the repository first on ``PYTHONPATH``, for the
    ``sweep.measure.trial`` and ``sweep.worker`` children (the project need not be installed), and this
    process's pid in ``DESIGNZOO_PARENT_PID`` (``watch_parent``). ``DESIGNZOO_NVTX`` is not
    inherited from the user's shell: NVTX ranges add host time to an eager decode, so only the
    parent's profile (``profile.nvtx``, passed in the child's spec) turns them on."""
    env = {k: v for k, v in os.environ.items() if k != "DESIGNZOO_NVTX"}
    return dict(env, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), **{PARENT_PID: str(os.getpid())})


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class ChildTimeout(Exception):
    """A child ran past its time limit and was killed (its process group whole)."""


class Child:
    """A child process started by ``start``: its own process group, its output pumped line by
    line into its log (and to ``on_line``) by a thread of this process."""

    def __init__(self, proc: subprocess.Popen, reader, log):
        self.proc, self._reader, self._log = proc, reader, log

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.proc.poll()

    def terminate(self) -> None:
        """SIGTERM to the child alone (a study's worker records and re-queues its design)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the child's whole process group; waits for it."""
        _kill(self.proc)
        self._close(5)

    def wait(self, timeout_s: float | None = None) -> int:
        """Wait for the child's exit (``timeout_s`` s; None: no limit) and return its code. Where
        a study's trial loop takes Ctrl-C or SIGTERM (``common.interrupts``; a lock's wait is the
        other place): a signal held since the trial began is raised on entry, one that lands now
        at once, and one whose exception Python swallowed within half a second.

        Raises:
            ChildTimeout: past ``timeout_s``; the child is killed first.
            KeyboardInterrupt: a signal; the child is killed first.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        seen = interrupt_count()
        try:
            with interrupts_allowed():
                while True:
                    left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                    try:
                        rc = self.proc.wait(timeout=max(0.0, left))  # 0: one that has exited
                        break
                    except subprocess.TimeoutExpired:
                        raise_if_swallowed(seen)
                        if deadline is not None and time.monotonic() >= deadline:
                            raise ChildTimeout(
                                f"exceeded {timeout_s:g} s and was killed") from None
        except BaseException:  # past its time, Ctrl-C, SIGTERM: the child must not outlive us
            self.kill()
            raise
        self._close(30)
        return rc

    def _close(self, join_s: float) -> None:
        self._reader.join(timeout=join_s)
        self._log.close()


def start(cmd: list[str], log_path: Path, env: dict | None = None, on_line=None) -> Child:
    """Start ``cmd`` as a child of this process: the one way every child starts (trial, profiler
    runs, ceilings, calibration, a study's workers). A trial, ceilings or calibration child
    with no wrapper (``python -m`` of ``forked.FORKABLE``) is forked from this process's fork
    server, which has imported torch, triton and the zoo once (where it cannot serve, the child
    starts as a new interpreter).

    The child runs from the repository root with ``child_env()`` (plus ``env``), in its own
    process group (``Child.kill`` ends it whole), dies with this process (``die_with_parent``;
    ``watch_parent`` in the child covers a wrapper between us), and its stdout and stderr go to
    ``log_path`` line by line; ``on_line(line)`` sees each line as it comes (progress markers:
    ``progress_line``; a worker's console echo).

    Raises:
        KeyboardInterrupt: a signal arrived while the child was starting (the child is ended
            first).
    """
    import threading

    full = child_env()
    full.update(env or {})
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w")  # closed by Child once the output ends
    seen = interrupt_count()
    try:
        proc = forked.spawn(cmd, full) if forked.forkable(cmd) else None
    except BaseException:  # Ctrl-C while the server started: nothing of ours left open
        log.close()
        raise
    if proc is None:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=full, start_new_session=True, preexec_fn=die_with_parent,
                                text=True, errors="replace", bufsize=1)

    def pump():
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if on_line is not None:
                try:
                    on_line(line.rstrip("\n"))
                except Exception:  # noqa: BLE001 - a display must never end a measurement
                    pass

    try:
        raise_if_swallowed(seen)  # a signal's exception swallowed in the fork's at-fork hook
        reader = threading.Thread(target=pump, name="child-output", daemon=True)
        reader.start()
    except BaseException:  # interrupted before the caller holds the child: end it here
        _kill(proc)
        log.close()
        raise
    return Child(proc, reader, log)


def launch(cmd: list[str], log_path: Path, timeout_s: float | None, env: dict | None = None,
           on_line=None, done=None) -> int:
    """``start`` ``cmd`` and wait for it (``timeout_s`` s in all); returns the exit code.

    A forked child whose fork server died under it (``ForkedProc.server_lost``: killed with
    it, not failed) is started once more, by a new server or as a new interpreter, in the time
    left, unless ``done()`` says its work was finished (a trial's result written).

    Raises:
        ChildTimeout: past ``timeout_s``; the child's process group is killed first.
    """
    end = None if timeout_s is None else time.monotonic() + timeout_s
    child = start(cmd, log_path, env, on_line)
    rc = child.wait(timeout_s)
    if getattr(child.proc, "server_lost", False) and not (done is not None and done()):
        print(f"fork server: lost while {cmd[2]} ran; it starts again", file=sys.stderr)
        rc = start(cmd, log_path, env, on_line).wait(
            None if end is None else max(1.0, end - time.monotonic()))
    return rc


def log_tail(log_path: Path, n: int = 600) -> str:
    """The last ``n`` characters of a child's log (its error, for a failure's reason)."""
    try:
        return log_path.read_text()[-n:].strip()
    except OSError:
        return ""


def progress_line(kind: str, text: str, done: int | None = None, total: int | None = None) -> None:
    """Print a progress marker for the parent (``@phase TEXT`` or ``@progress DONE/TOTAL TEXT``)
    on this child's stdout; the parent's display follows it (``sweep.report.progress``)."""
    count = f" {done}/{total}" if done is not None and total is not None else ""
    print(f"@{kind}{count} {text}", flush=True)


def trial_spec(cfg, workload: dict, device_type: str, mode: str, trial_dir: Path, *,
               seed: int = 0, weights: str | None = None, profile: dict | None = None,
               switches=None, tuning_dir: Path | None = None, fault: str | None = None,
               env: dict | None = None) -> dict:
    """The spec ``sweep.measure.trial`` reads (``run_child``'s ``spec``): the design
    (``cfg.to_dict()``), its workload, device type and mode, the seed, a weights file, what to
    profile, the kernel switches (``kernels.switches.Switches``; None: the defaults), the tuning
    store, an injected fault and the child's extra environment variables."""
    return {"model": cfg.to_dict(), "workload": workload, "device": device_type, "mode": mode,
            "seed": seed, "weights": weights, "fault": fault, "profile": profile or {},
            "trial_dir": str(trial_dir),
            "switches": switches.to_dict() if switches is not None else None,
            "tuning_dir": str(tuning_dir) if tuning_dir is not None else None, "env": env or {}}


def run_child(spec: dict, trial_dir: Path, timeout_s: float, wrapper: list[str] | None = None,
              on_line=None) -> dict:
    """Run ``python -m sweep.measure.trial`` on ``spec`` in a child process (optionally under
    ``wrapper``, e.g. an ``ncu`` argument list) and return its result dict.

    Writes ``spec.json``, ``result.json`` and ``log.txt`` into ``trial_dir``; ``on_line`` sees the
    child's output lines (``launch``). Never raises for a child failure: the returned dict has
    ``status: error``, an ``error_type`` and a reason instead.
    """
    trial_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = trial_dir / "spec.json", trial_dir / "result.json"
    write_json(spec_path, spec)
    result_path.unlink(missing_ok=True)
    cmd = (wrapper or []) + [sys.executable, "-m", "sweep.measure.trial", str(spec_path), str(result_path)]
    try:
        rc = launch(cmd, trial_dir / "log.txt", timeout_s, spec.get("env", {}), on_line,
                    done=result_path.exists)
    except ChildTimeout:
        return {"status": "error", "error_type": "timeout",
                "error": f"trial exceeded {timeout_s:g} s and was killed"}
    if result_path.exists():
        res = json.loads(result_path.read_text())
        if res.get("status") == "ok" and rc != 0 and not wrapper:
            res = {"status": "error", "error_type": "exit", "error": f"child exited with {rc}"}
        return res
    tail = log_tail(trial_dir / "log.txt")
    if rc < 0:
        why = f"child killed by signal {signal.Signals(-rc).name}"
    else:
        why = f"child exited with code {rc} and wrote no result"
    return {"status": "error", "error_type": "crash", "error": f"{why}; log tail: {tail}"}


def child_failure(res: dict, what: str = "") -> str:
    """``error_type: error`` of a failed child result, prefixed with ``what`` when given."""
    return (f"{what}: " if what else "") + f"{res.get('error_type', 'error')}: {res.get('error', '')}"
