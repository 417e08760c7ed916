"""Progress a person can follow (tqdm): the study's designs, the phase inside a design, the
ceilings and the calibration, each with its bar, on a terminal only.

Where the output is not a terminal (a pipe, a CI log) no bar is drawn: the study's one line per
design stays the record. The measuring children report what they are doing with markers on their
output (``sweep.measure.child.progress_line``: ``@phase TEXT``, ``@progress DONE/TOTAL TEXT``),
which ``on_line`` turns into the bar's text; a task's own bar (``TaskProgress``) shows once it
has lasted ``PHASE_AFTER_S``.
"""

from __future__ import annotations

import os
import sys

PHASE_AFTER_S = 2.0


def interactive(stream=None) -> bool:
    """Whether ``stream`` (default stderr, where the bars go) is a terminal that draws them."""
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb"


def _width() -> dict:
    """tqdm's size arguments: the terminal's, or 100 x 40 where it reports none (a fresh
    pseudo-terminal: tqdm then draws nothing)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        size = os.terminal_size((0, 0))
    return {"dynamic_ncols": True} if size.columns > 0 and size.lines > 0 else \
        {"ncols": 100, "nrows": 40}


def parse_marker(line: str) -> tuple[str, str] | None:
    """``("phase", text)`` or ``("progress", "DONE/TOTAL text")`` of a child's marker line, else
    None."""
    for kind in ("phase", "progress"):
        if line.startswith(f"@{kind} "):
            return kind, line[len(kind) + 2:].strip()
    return None


class StudyProgress:
    """The study's bar: designs done of ``total`` (``initial`` already done), elapsed, time left,
    the last design's headline figure, and the running design's phase.

    ``line(text)`` prints a design's line above the bar (plain ``print`` without a terminal);
    ``on_line`` is a child's output follower (``sweep.measure.child.launch``)."""

    def __init__(self, total: int, initial: int = 0, quiet: bool = False, desc: str = "designs"):
        from tqdm import tqdm

        self.enabled = interactive() and not quiet
        self.quiet = quiet
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="design", file=sys.stderr,
                        disable=not self.enabled, leave=True, **(_width() if self.enabled else {}),
                        bar_format="{desc}: {n_fmt}/{total_fmt} |{bar}| {elapsed}<{remaining}"
                                   " {postfix}")
        self.headline = ""
        self._phase = ""

    def line(self, text: str) -> None:
        """Print ``text`` above the bar (a plain print without a terminal; nothing if quiet)."""
        if self.quiet:
            return
        if self.enabled:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, flush=True)

    def start(self, label: str) -> None:
        """A design starts: its label shows as the phase."""
        self._set(f"{label}: starting", now=True)

    def on_line(self, line: str) -> None:
        """A line of the running design's child: a progress marker becomes the bar's phase."""
        got = parse_marker(line)
        if got is not None:
            self._set(got[1])

    def _set(self, phase: str, now: bool = False) -> None:
        if not self.enabled or phase == self._phase:
            return
        self._phase = phase
        post = (f"last: {self.headline} | " if self.headline else "") + phase
        self.bar.set_postfix_str(post[:120], refresh=True)

    def done(self, headline: str | None = None) -> None:
        """A design finished (``headline``: its figure, for the bar)."""
        if headline:
            self.headline = headline
        self._phase = ""
        if self.enabled:
            self.bar.set_postfix_str(f"last: {self.headline}"[:120], refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()


class TaskProgress:
    """A bar for one long task run in a child (the ceilings, a calibration): its phases and
    counts from the child's markers; drawn once the task has lasted ``PHASE_AFTER_S`` (tqdm's
    ``delay``), on a terminal only. Use as a context manager; pass ``on_line`` to the launcher."""

    def __init__(self, desc: str, quiet: bool = False):
        from tqdm import tqdm

        self.enabled = interactive() and not quiet
        self.bar = tqdm(total=None, desc=desc, file=sys.stderr, disable=not self.enabled,
                        delay=PHASE_AFTER_S, leave=False, **(_width() if self.enabled else {}),
                        bar_format="{desc}: {postfix} [{elapsed}]")
        self.desc = desc

    def on_line(self, line: str) -> None:
        """A line of the task's child: a ``progress`` marker (``done/total what``) or a phase
        becomes the bar's text."""
        got = parse_marker(line)
        if got is None or not self.enabled:
            return
        kind, text = got
        if kind == "progress":
            count, _, what = text.partition(" ")
            done, _, total = count.partition("/")
            if done.isdigit() and total.isdigit():
                self.bar.set_postfix_str(f"{what} {done}/{total}", refresh=True)
                return
        self.bar.set_postfix_str(text, refresh=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()
        return False
