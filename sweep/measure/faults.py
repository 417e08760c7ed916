"""Deliberate failures for the fault-injection tests (``fault=measure:compile``).

``broken`` is a Triton kernel that cannot compile: it names a variable that does not exist. On a
GPU Triton raises ``triton.compiler.errors.CompilationError`` at the first launch; under
``TRITON_INTERPRET=1`` the interpreter raises ``triton.runtime.errors.InterpreterError``. Either
way the trial's child records ``kernel compile error`` (``sweep.measure.trial.classify``).
"""

from __future__ import annotations

import triton
import triton.language as tl


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
