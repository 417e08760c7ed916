"""Workers: several processes measuring one study on shared storage.

``run_workers`` (parent side) starts ``python -m sweep.worker PLAN.pkl INDEX TARGET``, one per GPU
(``CUDA_VISIBLE_DEVICES`` set by the parent), all on the same Optuna study in shared storage. A
worker measures designs one at a time, each in its own child process as in a one-worker study,
until the study has no queued design left (a grid) or ``TARGET`` designs are finished or running
(adaptive samplers). Several hosts: start ``python -m sweep ... sweep.workers=N
study.storage=postgresql://...`` on each host with the same study name and storage; each host's
workers join the one study (README, "Many GPUs").
"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import optuna

from .caches.ceiling_cache import measure_ceilings
from .common.atomic import write_atomic
from .common.interrupts import interrupt_count, raise_if_swallowed, sigterm_interrupts
from .measure.child import ChildTimeout, start
from .measure.parent import watch_parent
from .objective import Objective
from .runs import run_trials, stop_if_stdout_gone
from .space import grid_of
from .storage import open_study


def run_workers(plan, target: int) -> dict:
    """Measure the study's designs with ``plan.workers`` processes (``python -m sweep.worker``)
    on the shared storage, each pinned to one GPU of ``plan.gpus`` through
    ``CUDA_VISIBLE_DEVICES`` (on a CPU run they share the CPU). Each worker runs
    ``sweep.runs.run_trials``, as a one-worker study does: on a grid every design is
    queued once and taken by one worker; otherwise workers stop once finished plus running
    trials reach ``target``. Worker logs: ``<results>/worker<i>.log``, echoed here line by line; each worker
    is started by ``sweep.measure.child.start`` (its own process group, dies with this process).
    Returns the ceilings of the device (measured once, shared through the cache)."""
    # once, before the workers read the cache
    ceilings = measure_ceilings(plan.device, cache_dir=plan.cache("ceilings"))
    pkl = write_atomic(plan.results / "worker_plan.pkl", lambda p: p.write_bytes(pickle.dumps(plan)))
    children, logs = [], []
    for i in range(plan.workers):
        env = {"CUDA_VISIBLE_DEVICES": str(plan.gpus[i])} if plan.device["type"] == "cuda" else {}
        log = plan.results / f"worker{i}.log"
        echo = None if plan.quiet else (
            lambda line, i=i: line.strip() and print(f"[worker {i}] {line}", flush=True))
        children.append(start([sys.executable, "-m", "sweep.worker", str(pkl), str(i), str(target)],
                              log, env, echo))
        logs.append(log)
    restore, seen = sigterm_interrupts(), interrupt_count()
    try:
        while any(c.poll() is None for c in children):
            stop_if_stdout_gone()  # the reader went away: the workers stopped as after Ctrl-C
            time.sleep(0.5)
            raise_if_swallowed(seen)  # a signal whose exception Python lost
    except BaseException:  # Ctrl-C, SIGTERM: each worker records and re-queues its trial
        stop_workers(children)
        raise
    finally:
        restore()
    for i, c in enumerate(children):
        rc = c.wait()
        if rc != 0:
            print(f"worker {i} exited with code {rc}; see {logs[i]}", flush=True)
    return ceilings



# how long a stopped worker may take to record and re-queue its design before it is killed
STOP_WAIT_S = 30.0


def stop_workers(children: list, wait_s: float = STOP_WAIT_S) -> None:
    """SIGTERM to each worker (``sweep.measure.child.Child``), then up to ``wait_s`` (s) in all
    for them to record and re-queue their running designs; one still running then is killed
    with its process group (its trial, left RUNNING by a dead process, is re-queued on resume:
    ``storage.recover_interrupted``), so a stopped study ends within ``wait_s``, no process
    left."""
    for c in children:
        c.terminate()
    deadline = time.monotonic() + wait_s
    for c in children:
        try:
            c.wait(max(0.0, deadline - time.monotonic()))
        except ChildTimeout:  # killed by wait
            pass


def work(plan, target: int) -> int:
    """Run trials of ``plan``'s study until none is left for this worker; returns how many this
    worker ran."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = open_study(plan)
    objective = Objective(plan, measure_ceilings(plan.device, cache_dir=plan.cache("ceilings"),
                                                 again_if_contended=False), target)
    return run_trials(study, objective, grid_of(plan.space, plan.base) if plan.queue_only else None,
                      target)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print("usage: python -m sweep.worker PLAN.pkl INDEX TARGET", file=sys.stderr)
        return 2
    watch_parent()  # a worker never outlives the study that started it
    plan = pickle.loads(Path(argv[0]).read_bytes())
    try:
        n = work(plan, int(argv[2]))
    except KeyboardInterrupt:
        print(f"worker {argv[1]} interrupted: its running design is queued again", flush=True)
        return 130
    print(f"worker {argv[1]} done: {n} trial(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
