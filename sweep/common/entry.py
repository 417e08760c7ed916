"""How every command ends on bad input: one ``error:`` line and an exit code, never a traceback.

``entry(main)`` runs a command's ``main()``: a missing, unreadable or unwritable path, or a bad
value, ends with one line and exit code 2 (the input is wrong); a ``RuntimeError`` (the work
itself failed: a measurement, a child process) with one line and exit code 1.
"""

from __future__ import annotations

import sys


def entry(main) -> int:
    """``main()``'s exit code, or 2 after ``OSError`` / ``ValueError`` (file errors: missing,
    truncated, not a study folder, no permission; bad values), 1 after ``RuntimeError``; each
    printed as one ``error:`` line on stderr."""
    try:
        return main()
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
