"""Cache locks: one process at a time reads, extends and writes a device cache.

The calibration, the measured ceilings and the tile choices are caches that several processes
(workers of one study, studies side by side) read, top up and write back. Each such
read-modify-write holds ``cache_lock`` (``filelock``, a lock file beside the cache), so a second
process waits, then finds what the first one measured instead of measuring it again or writing
over it. A lock also keeps two measurements of one device from running at once.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from filelock import FileLock, Timeout

from .interrupts import interrupts_allowed


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
        with interrupts_allowed():  # a wait, no storage write: Ctrl-C ends it at once
            lock.acquire()
    try:
        yield
    finally:
        lock.release()


def device_lock_path(device: dict) -> Path:
    """The machine-wide lock file of one device (``<tmp>/designzoo-locks/``: every study,
    results folder and worker of this machine sees it): ``gpu<index>`` or ``cpu``."""
    import tempfile

    key = f"gpu{device.get('index', 0)}" if device.get("type") == "cuda" else "cpu"
    folder = Path(tempfile.gettempdir()) / "designzoo-locks"
    folder.mkdir(exist_ok=True)
    if folder.stat().st_uid == os.getuid() and folder.stat().st_mode & 0o1777 != 0o1777:
        folder.chmod(0o1777)  # every user's studies share it (mkdir's mode is cut by the umask)
    return folder / f"{key}.lock"


@contextlib.contextmanager
def device_lock(device: dict, log=print):
    """One measurement at a time on ``device`` across every process of this machine (two
    studies, a worker of each): hold its lock for the ``with`` block, saying once through
    ``log`` when another process holds it."""
    path = device_lock_path(device)
    lock = FileLock(str(path), mode=0o666)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"waiting for the {device.get('name', device.get('type'))}: another process "
            f"measures on it ({path})")
        with interrupts_allowed():  # a wait, no storage write: Ctrl-C ends it at once
            lock.acquire()
    try:
        yield
    finally:
        lock.release()
