"""Ctrl-C and SIGTERM in a study: raised only where no storage operation can be cut.

A study ends on SIGINT or SIGTERM like on Ctrl-C (``KeyboardInterrupt``): the running design is
recorded and queued again, every finished one kept. Python raises that exception wherever the main
thread happens to be, and two places lose it or hang on it:

- **Inside a storage operation.** An exception cut into SQLAlchemy can leave the connection's
  transaction open, its SQLite write lock held by this process: every later write, this
  process's own (the interrupted trial's record) and the other workers', then waits out the
  busy timeout (60 s, ``sweep.storage``) and fails (seen on CI: a two-worker study took more
  than 60 s to stop; reproduced with timer signals into Optuna's ``set_user_attr``: 4 held
  locks in 140 interrupts).
- **Inside a callback Python runs for itself** (a garbage collector's callback, an at-fork
  hook): the exception is printed ("Exception ignored") and lost, and a study waiting on a
  hanging trial waits forever.

So the handler counts every signal; inside ``deferred_interrupts`` (a study's trial loop) it only
holds it, and the exception is raised where nothing is half-written: on entering
``interrupts_allowed`` (a wait on a child process, ``sweep.measure.child.Child.wait``), or when
the block ends. ``raise_if_swallowed`` raises one that Python lost.
"""

from __future__ import annotations

import contextlib
import signal

_INTERRUPTS = [0, ""]  # [SIGINT / SIGTERM seen by interrupt_handler in this process, the last's why]
_DEFERRED = [False, None]  # [inside deferred_interrupts, the held signal's message or None]


def interrupt_handler(signum, frame) -> None:
    """The study's SIGINT and SIGTERM handler (``sigterm_interrupts``): count the signal, then
    raise ``KeyboardInterrupt`` in the main thread, or hold it inside ``deferred_interrupts``
    (raised when the block ends or on entering ``interrupts_allowed``). A second signal while
    one is held is raised at once (a storage that hangs can still be left).

    Raises:
        KeyboardInterrupt: unless the signal is held; its message names a SIGTERM ("signal
            SIGTERM"), empty for Ctrl-C.
    """
    why = "" if signum == signal.SIGINT else f"signal {signal.Signals(signum).name}"
    _INTERRUPTS[0] += 1
    _INTERRUPTS[1] = why
    if _DEFERRED[0] and _DEFERRED[1] is None:
        _DEFERRED[1] = why
        return
    raise KeyboardInterrupt(why)  # a held one stays held: raised at the block's end if this is lost


def interrupt_count() -> int:
    """How many SIGINT / SIGTERM this process's handler has seen (for ``raise_if_swallowed``)."""
    return _INTERRUPTS[0]


def raise_if_swallowed(seen: int) -> None:
    """Where a signal's exception would have ended a wait: raise it again if the handler ran
    since ``interrupt_count()`` was ``seen`` but the exception never arrived (Python swallowed it
    in one of its own callbacks). Nothing is raised while the signal is only held
    (``deferred_interrupts``).

    Raises:
        KeyboardInterrupt: a signal was swallowed; the message names it as the handler's does.
    """
    if _INTERRUPTS[0] != seen and _DEFERRED[1] is None and not _DEFERRED[0]:
        raise KeyboardInterrupt(_INTERRUPTS[1])


@contextlib.contextmanager
def deferred_interrupts():
    """Hold a SIGINT / SIGTERM that lands in this block until it ends (then ``KeyboardInterrupt``
    is raised), except inside ``interrupts_allowed``, where it is raised at once.
    ``sweep.runs.run_trials`` runs each trial in it: a signal landing inside a storage operation
    (Optuna's ``ask`` or ``tell``, a user attribute, a re-queue) would leave a RUNNING trial no
    one owns, or a SQLite write lock held (module docstring).

    The outermost block lets go of a held signal however it ends: raised when the block ends
    normally, dropped when it ends by an exception (the study is ending already), never left
    to strike a later wait.

    Raises:
        KeyboardInterrupt: on leaving the block normally, when a signal was held."""
    old = _DEFERRED[0]
    _DEFERRED[0] = True
    why = None
    try:
        yield
    finally:
        _DEFERRED[0] = old
        if not old:
            why, _DEFERRED[1] = _DEFERRED[1], None
    if why is not None:
        raise KeyboardInterrupt(why)


def raise_held() -> None:
    """Inside ``deferred_interrupts``, between two storage operations (after a trial is told):
    raise a held signal now.

    Raises:
        KeyboardInterrupt: when a signal was held."""
    if _DEFERRED[1] is not None:
        why, _DEFERRED[1] = _DEFERRED[1], None
        raise KeyboardInterrupt(why)


@contextlib.contextmanager
def interrupts_allowed():
    """Inside ``deferred_interrupts``: raise a held signal now and any new one at once (a wait
    on a child process, where no storage operation runs).

    Raises:
        KeyboardInterrupt: on entry, when a signal was held."""
    old = _DEFERRED[0]
    _DEFERRED[0] = False
    try:
        raise_held()
        yield
    finally:
        _DEFERRED[0] = old


def sigterm_interrupts():
    """Make SIGTERM end the study like Ctrl-C (``KeyboardInterrupt``) in the main thread, both
    through ``interrupt_handler``, so an interrupted trial is recorded and queued again. Returns
    the function restoring the old handlers (a no-op outside the main thread)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = {s: signal.signal(s, interrupt_handler) for s in (signal.SIGINT, signal.SIGTERM)}
    return lambda: [signal.signal(s, h) for s, h in old.items()]
