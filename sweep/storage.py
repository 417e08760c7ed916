"""Where a study lives and how it recovers: the Optuna storage, open/resume, interrupted trials.

The storage is SQLite by default (one worker), a JournalStorage file for several workers on one
host, or any RDB URL (PostgreSQL for several hosts). A trial left RUNNING by a process that died is
marked FAIL (``interrupted``) and its design queued again, so no design is lost.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import optuna
from optuna.trial import TrialState

from .space import make_sampler


def get_storage(url: str):
    """The Optuna storage for ``url``: a path ending in ``.journal`` or ``journal:PATH`` is a
    ``JournalStorage`` on a ``JournalFileBackend`` (many processes on one host); anything else
    goes to ``optuna.storages.get_storage`` (``sqlite:///...``, ``postgresql://...``).

    Raises:
        RuntimeError: the storage cannot be opened (the message names the URL and the cause).
    """
    try:
        if url.startswith("journal:") or url.endswith(".journal"):
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            path = Path(url.removeprefix("journal:"))
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        return optuna.storages.get_storage(url)
    except Exception as e:  # noqa: BLE001 - any driver error: name the URL
        raise RuntimeError(f"cannot open study storage {url!r}: {type(e).__name__}: {e}") from e


def open_study(plan) -> optuna.Study:
    """Create or load the study (``load_if_exists``) with the plan's sampler and directions.

    Raises:
        RuntimeError: the storage URL cannot be opened (the message names it).
    """
    storage = get_storage(plan.storage)
    study = optuna.create_study(study_name=plan.name, storage=storage, load_if_exists=True,
                                directions=plan.directions, sampler=make_sampler(plan))
    if list(study.directions) != [optuna.study.StudyDirection[d.upper()]
                                  for d in plan.directions]:
        raise RuntimeError(f"study {plan.name!r} exists with other directions")
    study.set_user_attr("objectives", plan.objectives)
    study.set_user_attr("experiment", plan.experiment)
    study.set_user_attr("workload", plan.workload)
    study.set_user_attr("device", plan.device["name"])
    return study


def recover_interrupted(study: optuna.Study) -> int:
    """Mark RUNNING trials whose worker process on this host is gone as FAIL (``interrupted``)
    and queue their designs again. Returns how many were recovered."""
    host = socket.gethostname()
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get("worker_host") != host or _alive(t.user_attrs.get("worker_pid")):
            continue
        study._storage.set_trial_user_attr(t._trial_id, "fail_reason",
                                           "interrupted: the study process died during the trial")
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study.tell(t.number, state=TrialState.FAIL)
        if t.params:
            study.enqueue_trial(t.params, skip_if_exists=False)
        n += 1
    return n


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def finished(study: optuna.Study) -> int:
    """Designs finished (COMPLETE, FAIL, PRUNED), not counting trials cut off by a killed run
    nor a worker's spare trial (see ``Objective``)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished()
               and not t.user_attrs.get("interrupted") and not t.user_attrs.get("spare"))



def queued(study: optuna.Study) -> bool:
    """Whether the study has a queued (WAITING) design."""
    return any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))

