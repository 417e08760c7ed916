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
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna

from .analysis.hardware import measure_ceilings
from .common.atomic import write_atomic
from .common.env import REPO
from .measure.child import child_env, die_with_parent, watch_parent
from .objective import Objective
from .runs import run_trials
from .space import grid_of
from .storage import open_study


def run_workers(plan, target: int) -> dict:
    """Measure the study's designs with ``plan.workers`` processes (``python -m sweep.worker``)
    on the shared storage, each pinned to one GPU of ``plan.gpus`` through
    ``CUDA_VISIBLE_DEVICES`` (on a CPU run they share the CPU). Each worker runs
    ``sweep.runs.run_trials``, as a one-worker study does: on a grid every design is
    queued once and taken by one worker; otherwise workers stop once finished plus running
    trials reach ``target``. Worker logs: ``<results>/worker<i>.log``, echoed here as they grow.
    Returns the ceilings of the device (measured once, shared through the cache)."""
    # once, before the workers read the cache
    ceilings = measure_ceilings(plan.device, cache_dir=plan.cache("ceilings"))
    pkl = write_atomic(plan.results / "worker_plan.pkl", lambda p: p.write_bytes(pickle.dumps(plan)))
    procs, logs = [], []
    for i in range(plan.workers):
        env = child_env()
        if plan.device["type"] == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = str(plan.gpus[i])
        log = plan.results / f"worker{i}.log"
        fh = open(log, "w")  # closed after the worker exits
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "sweep.worker", str(pkl), str(i), str(target)],
            cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent), fh))
        logs.append([log, 0])
    try:
        while True:
            alive = [p.poll() is None for p, _ in procs]
            for i, entry in enumerate(logs):
                text = entry[0].read_text(errors="replace")
                new, entry[1] = text[entry[1]:], len(text)
                for line in new.splitlines():
                    if not plan.quiet and line.strip():
                        print(f"[worker {i}] {line}", flush=True)
            if not any(alive):
                break
            time.sleep(0.5)
    except BaseException:  # Ctrl-C, SIGTERM: each worker records and re-queues its trial
        for p, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, _ in procs:
            p.wait()
        raise
    for i, (p, fh) in enumerate(procs):
        fh.close()
        if p.returncode != 0:
            print(f"worker {i} exited with code {p.returncode}; see {logs[i][0]}", flush=True)
    return ceilings



def work(plan, target: int) -> int:
    """Run trials of ``plan``'s study until none is left for this worker; returns how many this
    worker ran."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = open_study(plan)
    objective = Objective(plan, measure_ceilings(plan.device, cache_dir=plan.cache("ceilings")),
                          target)
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
