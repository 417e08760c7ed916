"""A child process's tie to the process that started it: it must not outlive it.

``die_with_parent`` (in a child just forked) asks Linux to kill it when its parent dies;
``watch_parent`` (in the child's main) ends it when the process named by
``DESIGNZOO_PARENT_PID`` is gone, which covers a wrapper (``ncu``) or a fork server between them.
"""

from __future__ import annotations

import os
import signal
import sys

PARENT_PID = "DESIGNZOO_PARENT_PID"  # the process a child must not outlive


def die_with_parent() -> None:
    """In a child just forked (``preexec_fn``): ask Linux to SIGKILL it when its parent dies
    (``prctl(PR_SET_PDEATHSIG)``). Elsewhere a no-op; ``watch_parent`` covers the rest."""
    if sys.platform != "linux":
        return
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def watch_parent(interval_s: float = 0.5) -> None:
    """In a child (``sweep.measure.trial``, ``sweep.worker``): end this process's group at once when the
    process named by ``DESIGNZOO_PARENT_PID`` is gone, e.g. after a ``kill -9`` of the study.

    Covers what ``die_with_parent`` cannot: a child under a profiler wrapper (``ncu``) whose
    direct parent is the wrapper, and platforms without ``PR_SET_PDEATHSIG``.
    """
    import threading
    import time

    pid = int(os.environ.get(PARENT_PID, "0") or 0)
    if pid <= 0:
        return

    def watch():
        while True:
            time.sleep(interval_s)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                try:
                    os.killpg(os.getpgrp(), signal.SIGKILL)
                finally:
                    os._exit(137)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()
