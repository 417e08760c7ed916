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

import json
import os
import pickle
import subprocess
import sys
import time
from dataclasses import replace
from itertools import product
from pathlib import Path

import optuna
from optuna.trial import TrialState

from .analysis.hardware import measure_ceilings
from .env import REPO
from .measure.child import child_env
from .objective import Objective, TrialFailed
from .storage import finished, open_study, queued


def run_workers(plan, study: optuna.Study, grid: dict | None, target: int) -> dict:
    """Measure the study's designs with ``plan.workers`` processes (``python -m sweep.worker``)
    on the shared storage, each pinned to one GPU of ``plan.gpus`` through
    ``CUDA_VISIBLE_DEVICES`` (on a CPU run they share the CPU). On a grid every design not yet
    finished or queued is enqueued once, and workers take queued designs only, so none runs
    twice; otherwise workers stop once finished plus running trials reach ``target``. Worker
    logs: ``<results>/worker<i>.log``, echoed here as they grow. Returns the ceilings of the
    device (measured once, shared through the cache)."""
    queue_only = bool(grid)
    if queue_only:
        have = {json.dumps(t.params, sort_keys=True) for t in study.get_trials(deepcopy=False)
                if t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE,
                               TrialState.PRUNED)
                or (t.state == TrialState.FAIL and not t.user_attrs.get("interrupted"))}
        for point in product(*grid.values()):
            params = dict(zip(grid, point))
            if json.dumps(params, sort_keys=True) not in have:
                study.enqueue_trial(params)
    ceilings = measure_ceilings(plan.device)  # once, before the workers read the cache
    wplan = replace(plan, queue_only=queue_only)
    pkl = plan.results / "worker_plan.pkl"
    tmp = pkl.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(wplan))
    os.replace(tmp, pkl)
    procs, logs = [], []
    for i in range(plan.workers):
        env = child_env()
        if plan.device["type"] == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = str(plan.gpus[i])
        log = plan.results / f"worker{i}.log"
        fh = open(log, "w")  # closed after the worker exits
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "sweep.worker", str(pkl), str(i), str(target)],
            cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT), fh))
        logs.append([log, 0])
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
    for i, (p, fh) in enumerate(procs):
        fh.close()
        if p.returncode != 0:
            print(f"worker {i} exited with code {p.returncode}; see {logs[i][0]}", flush=True)
    return ceilings



def work(plan, target: int) -> int:
    """Run trials of ``plan``'s study until none is left for this worker; returns how many this
    worker finished."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = open_study(plan)
    objective = Objective(plan, measure_ceilings(plan.device), target)
    n = 0
    while True:
        if plan.queue_only:
            if not queued(study):
                break
        else:
            running = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
            if finished(study) + running >= target:
                break
        study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=True)
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print("usage: python -m sweep.worker PLAN.pkl INDEX TARGET", file=sys.stderr)
        return 2
    plan = pickle.loads(Path(argv[0]).read_bytes())
    n = work(plan, int(argv[2]))
    print(f"worker {argv[1]} done: {n} trial(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
