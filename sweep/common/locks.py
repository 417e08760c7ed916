"""Cache locks: one process at a time reads, extends and writes a device cache.

The calibration, the measured ceilings and the tile choices are caches that several processes
(workers of one study, studies side by side) read, top up and write back. Each such
read-modify-write holds ``cache_lock`` (``filelock``, a lock file beside the cache), so a second
process waits, then finds what the first one measured instead of measuring it again or writing
over it. A lock also keeps two measurements of one device from running at once.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from filelock import FileLock, Timeout


@contextlib.contextmanager
def cache_lock(path: str | Path, what: str, log=print):
    """Hold the lock of the cache at ``path`` (``<path>.lock``) for the ``with`` block; if
    another process holds it, say so once through ``log`` (naming ``what``), then wait."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path.with_name(path.name + ".lock")))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"waiting for another process that measures {what} ({lock.lock_file})")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
