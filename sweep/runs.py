"""The loops that run an ``Objective`` over a study: ``run_trials`` (measured designs, one at a
time, one worker or many) and ``run_predicted`` (predict-only studies, thousands of designs).
SIGTERM ends either like Ctrl-C, so an interrupted design is recorded and queued again; the
signal is raised only where no storage operation can be cut (``common.interrupts``)."""

from __future__ import annotations

import itertools

import optuna
from optuna.trial import TrialState

from .common.entry import STDOUT_CLOSED, stdout_gone
from .common.interrupts import deferred_interrupts, raise_held, sigterm_interrupts
from .objective import Objective, TrialFailed
from .storage import enqueue_next, finished, queued


def run_trials(study: optuna.Study, objective: Objective, grid: dict | None, target: int,
               after=None) -> int:
    """Measure designs one at a time until ``target`` designs are finished (counting those
    other processes are running) or, on a grid, every design of it is held by the storage.

    The one path for one worker and many: on a grid the next design not yet held is queued and
    taken from the queue (``enqueue_next``; a design held COMPLETE or RUNNING is never taken
    again, ``duplicate_of``). ``after()`` runs after each trial. Returns the trials this process
    ran.

    Ctrl-C and SIGTERM are held through each turn of the loop (its storage operations) and
    raised while the trial waits on its child process (``measure.child.Child.wait``), or when
    the turn ends: never a RUNNING trial without its worker, never a storage write cut in two.
    """
    n = 0
    restore = sigterm_interrupts()
    twins = 0  # proposals in a row of a design already run: an exhausted space ends the loop
    try:
        while True:
            with deferred_interrupts():
                stop_if_stdout_gone()
                running = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
                if finished(study) + running >= target or twins >= 200:
                    break
                if grid is not None and not queued(study) and not enqueue_next(study, grid):
                    break
                before = finished(study)
                # no collection after each trial: the trial ran in its child (0.3 s a design here)
                study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False)
                twins = twins + 1 if finished(study) == before else 0
                n += 1
                if after:
                    after()
    finally:
        restore()
    return n


def stop_if_stdout_gone() -> None:
    """Between trials: the reader of stdout went away (``| head``; ``common.entry.guard_stdout``)
    ends the study as an interrupt does, every finished design kept.

    Raises:
        KeyboardInterrupt: ``STDOUT_CLOSED``, when it went away."""
    if stdout_gone():
        raise KeyboardInterrupt(STDOUT_CLOSED)


def run_predicted(study: optuna.Study, objective: Objective, grid: dict | None, target: int,
                  after=None, every: int = 250) -> int:
    """``run_trials`` for a predict-only study (one process; a trial takes milliseconds): a grid's
    designs not yet held are queued at once, then one ``study.optimize`` call runs until
    ``target`` designs are finished; ``after()`` every ``every`` trials. Returns the designs
    finished by this call.

    Without a grid the sampler runs on an in-memory copy of the study (Optuna's
    ``InMemoryStorage``, holding every trial the storage has, so the sampler sees the whole
    history) and the finished trials go to the study's storage ``every`` trials and when the run
    ends or is interrupted (``Study.add_trials``: one transaction per trial instead of one per
    suggested parameter and attribute); only a SIGKILL loses the unflushed ones. It runs until
    ``target`` designs are finished, a sampler's second proposal of a design not counted (a
    seeded sampler replays its first proposals when a study is resumed or extended), or, past
    that replay, 200 proposals in a row were designs already held (the space is exhausted, as
    in ``run_trials``).

    Ctrl-C and SIGTERM never cut a trial or a write to the study's storage
    (``common.interrupts``): they are held until the running trial (a prediction of
    milliseconds) is told, then raised, and the finished trials are flushed; a trial cut in
    the middle would have been kept as a FAIL that holds its design on resume.
    """
    restore = sigterm_interrupts()
    try:
        with deferred_interrupts():  # a signal is raised between two writes, never inside one
            todo = target - finished(study)
            if grid is not None:
                while enqueue_next(study, grid):
                    raise_held()
                waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
                todo = min(todo, len(waiting))
            if todo <= 0:
                return 0
            count = itertools.count(1)
            if grid is not None:
                study.optimize(objective, n_trials=todo, catch=(TrialFailed,),
                               gc_after_trial=False,
                               callbacks=[lambda s, t: next(count) % every or (after and after()),
                                          lambda s, t: raise_held()])
                return todo
            return _predict_in_memory(study, objective, todo, count, after, every)
    finally:
        restore()


def _predict_in_memory(study, objective, todo: int, count, after, every: int) -> int:
    """``run_predicted`` with a sampler, inside its ``deferred_interrupts``: the sampler runs on
    an in-memory copy of the study; finished trials are flushed every ``every`` trials and at
    the end, a held signal raised once the running trial is told; it stops once ``todo`` new
    designs are finished or, past the ones a seeded sampler replays (as many as the study
    held), 200 proposals in a row were designs already held (said). Returns the new designs
    finished."""
    mem = optuna.create_study(storage=optuna.storages.InMemoryStorage(), sampler=study.sampler,
                              directions=study.directions, study_name=study.study_name)
    held = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    mem.add_trials(held)
    done = [len(held)]

    def flush():
        new = [t for t in mem.get_trials(deepcopy=False)[done[0]:] if t.state.is_finished()]
        study.add_trials(new)
        done[0] += len(new)

    new, twins = [0], [0]  # new designs finished; proposals in a row of a design already held

    def every_n(s, t):
        if t.user_attrs.get("duplicate_of") is None:
            new[0], twins[0] = new[0] + 1, 0
        else:
            twins[0] += 1
        if next(count) % every == 0:
            flush()
            if after:
                after()
        if new[0] >= todo or twins[0] >= len(held) + 200:
            s.stop()
        raise_held()

    try:
        mem.optimize(objective, n_trials=None, catch=(TrialFailed,), gc_after_trial=False,
                     callbacks=[every_n])
    finally:
        flush()
    if new[0] < todo:
        print(f"the sampler proposed {twins[0]} designs in a row that the study already holds: "
              f"its space looks exhausted after {new[0]} new design(s) of {todo}", flush=True)
    return new[0]
