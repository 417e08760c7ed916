"""How every command ends on bad input: one ``error:`` line and an exit code, never a traceback.

``entry(main)`` runs a command's ``main()``: a missing, unreadable or unwritable path, or a bad
value, ends with one line and exit code 2 (the input is wrong); a ``RuntimeError`` (the work
itself failed: a measurement, a child process) with one line and exit code 1.
``guard_stdout()``: a reader that goes away (``python -m sweep ... | head -1``) stops the study
at its next trial boundary as an interrupt does, not with a traceback.
"""

from __future__ import annotations

import os
import sys

STDOUT_CLOSED = "stdout closed"  # the KeyboardInterrupt's text when the reader went away
_GONE = [False]  # set once a write met a closed pipe


class _Guarded:
    """``sys.stdout`` whose write or flush into a closed pipe points the descriptor at
    ``os.devnull`` (nothing more is lost, in any thread) and marks it gone (``stdout_gone``):
    the study stops at its next trial boundary, the finished designs kept
    (``sweep.runs.stop_if_stdout_gone``), never in the middle of a write."""

    def __init__(self, stream):
        self._stream = stream

    def _gone(self):
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
        _GONE[0] = True

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def stdout_gone() -> bool:
    """Whether a write to this process's stdout met a closed pipe (``guard_stdout``)."""
    return _GONE[0]


def guard_stdout() -> None:
    """Install ``_Guarded`` over ``sys.stdout`` (once)."""
    if not isinstance(sys.stdout, _Guarded):
        sys.stdout = _Guarded(sys.stdout)


def entry(main) -> int:
    """``main()``'s exit code, or 2 after ``OSError`` / ``ValueError`` (file errors: missing,
    truncated, not a study folder, no permission; bad values), 1 after ``RuntimeError``; each
    printed as one ``error:`` line on stderr. Run as ``python -m NAME``, argparse's usage line
    names the command as typed (``usage: python -m sweep.cli.compare``, not ``compare.py``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and sys.argv:
        sys.argv[0] = f"python -m {spec.name}"
    try:
        return main()
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
