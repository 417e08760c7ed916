"""One worker of a multi-worker study: ``python -m sweep.worker PLAN.pkl INDEX TARGET``.

Started by ``sweep.study.run_workers``, one per GPU (``CUDA_VISIBLE_DEVICES`` set by the parent),
all on the same Optuna study in shared storage. The worker measures designs one at a time, each in
its own child process as in a one-worker study, until the study has no queued design left (a
grid) or ``TARGET`` designs are finished or running (adaptive samplers). Several hosts: start
``python -m sweep ... sweep.workers=N study.storage=postgresql://...`` on each host with the same
study name and storage; each host's workers join the one study (README, "Many GPUs").
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState


def work(plan, target: int) -> int:
    """Run trials of ``plan``'s study until none is left for this worker; returns how many this
    worker finished."""
    from .hardware import measure_ceilings
    from .study import Objective, TrialFailed, _queued, finished, open_study

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = open_study(plan)
    objective = Objective(plan, measure_ceilings(plan.device), target)
    n = 0
    while True:
        if plan.queue_only:
            if not _queued(study):
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
