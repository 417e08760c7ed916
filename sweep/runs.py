"""The loops that run an ``Objective`` over a study: ``run_trials`` (measured designs, one at a
time, one worker or many) and ``run_predicted`` (predict-only studies, thousands of designs).
SIGTERM ends either like Ctrl-C, so an interrupted design is recorded and queued again."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from .common.entry import STDOUT_CLOSED, stdout_gone
from .measure.child import deferred_interrupts
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
    """
    n = 0
    restore = sigterm_interrupts()
    twins = 0  # proposals in a row of a design already run: an exhausted space ends the loop
    try:
        while True:
            stop_if_stdout_gone()
            running = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
            if finished(study) + running >= target or twins >= 200:
                break
            if grid is not None and not queued(study) and not enqueue_next(study, grid):
                break
            before = finished(study)
            with deferred_interrupts():  # never a RUNNING trial without its worker
                study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=True)
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
    ``target`` designs are finished; ``after()`` every ``every`` trials. Returns the trials run.

    Without a grid the sampler runs on an in-memory copy of the study (Optuna's
    ``InMemoryStorage``, holding every trial the storage has, so the sampler sees the whole
    history) and the finished trials go to the study's storage ``every`` trials and when the run
    ends or is interrupted (``Study.add_trials``: one transaction per trial instead of one per
    suggested parameter and attribute). A trial running at the interrupt is not kept: it is a
    prediction of milliseconds, made again on resume; only a SIGKILL loses the unflushed ones.
    """
    todo = target - finished(study)
    if grid is not None:
        while enqueue_next(study, grid):
            pass
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        todo = min(todo, len(waiting))
    if todo <= 0:
        return 0
    count = iter(range(1, todo + 1))
    restore = sigterm_interrupts()
    if grid is not None:
        try:
            study.optimize(objective, n_trials=todo, catch=(TrialFailed,), gc_after_trial=False,
                           callbacks=[lambda s, t: next(count) % every or (after and after())])
        finally:
            restore()
        return todo
    mem = optuna.create_study(storage=optuna.storages.InMemoryStorage(), sampler=study.sampler,
                              directions=study.directions, study_name=study.study_name)
    held = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    mem.add_trials(held)
    done = [len(held)]

    def flush():
        new = [t for t in mem.get_trials(deepcopy=False)[done[0]:] if t.state.is_finished()]
        study.add_trials(new)
        done[0] += len(new)

    def every_n(s, t):
        if next(count) % every == 0:
            flush()
            if after:
                after()

    try:
        mem.optimize(objective, n_trials=todo, catch=(TrialFailed,), gc_after_trial=False,
                     callbacks=[every_n])
    finally:
        flush()
        restore()
    return todo


def sigterm_interrupts():
    """Make SIGTERM end the study like Ctrl-C (``KeyboardInterrupt``) in the main thread, so an
    interrupted trial is recorded and queued again; both through
    ``sweep.measure.child.interrupt_handler``, which also ends a trial whose start swallowed the
    interrupt. Returns the function restoring the old handlers."""
    import signal
    import threading

    from .measure.child import interrupt_handler

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = {s: signal.signal(s, interrupt_handler) for s in (signal.SIGINT, signal.SIGTERM)}
    return lambda: [signal.signal(s, h) for s, h in old.items()]
