"""NVTX ranges for Nsight tools, free when no profiler asked for them.

Range names are fixed so any Nsight tool can filter by them: ``prefill``, ``decode``, ``layer<i>``,
``attn``, ``ffn``, ``norm``, ``lm_head``. Ranges are pushed only when enabled (``enable()``, or the
environment variable ``DESIGNZOO_NVTX=1`` that the profiling modes set in the trial's child
process); otherwise ``annotate`` returns one shared no-op context manager, so the eager decode
step pays a function call per range and nothing else. Uses the ``nvtx`` package, falling back to
``torch.cuda.nvtx``.
"""

from __future__ import annotations

import contextlib
import os

_NOOP = contextlib.nullcontext()
_enabled = os.environ.get("DESIGNZOO_NVTX", "0") == "1"


def _push_pop():
    try:
        import nvtx as _nv

        return _nv.push_range, _nv.pop_range
    except ImportError:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


class _Range:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        _push(self.name)

    def __exit__(self, *exc):
        _pop()


_push, _pop = (None, None)


def enable(on: bool = True) -> None:
    """Turn NVTX ranges on or off for this process."""
    global _enabled, _push, _pop
    _enabled = on
    if on and _push is None:
        _push, _pop = _push_pop()


def enabled() -> bool:
    """Whether ``annotate`` pushes real NVTX ranges."""
    return _enabled


def annotate(name: str):
    """Context manager for an NVTX range named ``name`` (a no-op unless enabled)."""
    return _Range(name) if _enabled else _NOOP


if _enabled:
    enable(True)
