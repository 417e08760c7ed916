"""Atomic writes of outputs: write a temporary file beside the target, then rename it over.

A reader (another worker, a report, a killed run's successor) sees the old file or the new one,
never half of one. Used by every layer that writes results, so it sits at the bottom with
``sweep.common.env`` and imports nothing of the project.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path`` (its folder made if missing), then
    rename it to ``path``.

    Raises:
        OSError: ``path`` cannot be written (its message names ``path``, not the temporary)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # one per writing process
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:  # named as the user named it, not by the temporary beside it
        _drop(tmp)
        raise OSError(e.errno, f"cannot write {path} ({e.strerror or e})") from None
    except BaseException:  # a failed or interrupted write leaves the old file and no temporary
        _drop(tmp)
        raise
    return path


def _drop(tmp: Path) -> None:
    try:
        tmp.unlink(missing_ok=True)
    except OSError:  # (a folder that cannot be written cannot hold it either)
        pass


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return write_atomic(path, lambda p: p.write_text(text))


def write_json(path: str | Path, obj: dict) -> Path:
    """Write ``obj`` as JSON atomically (sets and tuples as lists, anything else as text)."""
    return write_text(path, json.dumps(obj, indent=1, default=_json_default))


def _json_default(o):
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def writable_dir(path: Path, key: str) -> Path:
    """``path``, made if missing, once a file can be written there.

    Raises:
        ValueError: naming ``key`` and the cause (not a folder, no permission, a read-only or
            virtual file system such as ``/proc``).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as e:
        raise ValueError(f"{key}={path}: cannot write there ({e.strerror or e})") from None
    return path
