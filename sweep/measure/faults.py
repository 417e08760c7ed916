"""Deliberate failures for the fault-injection tests (``fault=measure:compile``): the ``fault``
setting's items, checked before any work (``parse``), and the kernel that cannot compile.

``fault`` is a comma-separated list of ``WHERE:KIND`` (every trial) or ``WHERE:KIND@N`` (trial
``N`` only): ``WHERE`` one of ``WHERES`` (the trial child's start or its measurement), ``KIND``
one of ``KINDS`` (``sweep.measure.trial._inject``). A study run with one is a study of its own
(``fault`` in its identity).

``broken`` is a Triton kernel that cannot compile: it names a variable that does not exist. On a
GPU Triton raises ``triton.compiler.errors.CompilationError`` at the first launch; under
``TRITON_INTERPRET=1`` the interpreter raises ``triton.runtime.errors.InterpreterError``. Either
way the trial's child records ``kernel compile error`` (``sweep.measure.trial.classify``).
"""

from __future__ import annotations

import triton
import triton.language as tl

WHERES = ("start", "measure")
KINDS = ("raise", "oom", "hostoom", "crash", "hang", "nan", "compile")


def parse(fault: str | None) -> list[tuple[str, str, int | None]]:
    """``fault``'s items as ``(where, kind, trial number or None)``.

    Raises:
        ValueError: an item that is not ``WHERE:KIND`` or ``WHERE:KIND@N`` of the known places and
            kinds (named, with ``fault=``)."""
    out = []
    for item in (fault or "").split(","):
        spot, _, only = item.strip().partition("@")
        where, _, kind = spot.partition(":")
        if where not in WHERES or kind not in KINDS or (only and not only.isdigit()):
            raise ValueError(f"fault={fault!r}: {item.strip()!r} is not WHERE:KIND or "
                             f"WHERE:KIND@N (WHERE one of {', '.join(WHERES)}; KIND one of "
                             f"{', '.join(KINDS)}; N a trial number)")
        out.append((where, kind, int(only) if only else None))
    return out


def for_trial(fault: str | None, number: int) -> str | None:
    """The ``WHERE:KIND`` of ``fault`` that applies to trial ``number`` (the first), or None."""
    for where, kind, only in parse(fault) if fault else ():
        if only is None or only == number:
            return f"{where}:{kind}"
    return None


# a kernel that never compiles (it names an undefined value): it fails at its first launch
@triton.jit
def broken(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + not_defined_anywhere)  # noqa: F821


def launch_broken(device: str) -> None:
    """Launch ``broken`` on a 16-element tensor on ``device`` (raises)."""
    import torch

    x = torch.zeros(16, device=device)
    broken[(1,)](x, BLOCK=16)
