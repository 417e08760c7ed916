"""NVTX ranges for Nsight tools, free when no profiler asked for them.

Range names are fixed so any Nsight tool can filter by them: ``prefill``, ``decode``, ``layer<i>``,
``attn`` (inside it ``qkv``, ``rope``, ``kv_write``, ``attention``, ``out_proj``), ``ffn`` (inside
it ``w13``, ``act``, ``w2``), ``norm``, ``lm_head``. Ranges are pushed only when enabled
(``enable()``, or the environment variable ``DESIGNZOO_NVTX=1`` that the profiling modes set in
the trial's child process); otherwise ``annotate`` returns one shared no-op context manager, so the
eager decode step pays a function call per range and nothing else. Uses the ``nvtx`` package,
falling back to ``torch.cuda.nvtx``; with ``backend="torch"`` (``DESIGNZOO_NVTX=torch``) the same
ranges are ``torch.profiler`` ``record_function`` ranges instead, so torch.profiler can attribute
each kernel to its module (``sweep.measure.modules``).
"""

from __future__ import annotations

import contextlib
import os

_NOOP = contextlib.nullcontext()
_enabled = os.environ.get("DESIGNZOO_NVTX", "0") in ("1", "torch")
_backend = "torch" if os.environ.get("DESIGNZOO_NVTX") == "torch" else "nvtx"


def _push_pop(backend: str = "nvtx"):
    if backend == "torch":
        from torch.autograd.profiler import record_function

        stack = []

        def push(name):
            r = record_function(name)
            r.__enter__()
            stack.append(r)

        return push, lambda: stack.pop().__exit__(None, None, None)
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


def enable(on: bool = True, backend: str = "nvtx") -> None:
    """Turn the ranges on or off for this process; ``backend`` is ``nvtx`` (Nsight tools) or
    ``torch`` (``record_function``, seen by torch.profiler).

    Raises:
        ValueError: an unknown backend.
    """
    global _enabled, _push, _pop, _backend
    if backend not in ("nvtx", "torch"):
        raise ValueError(f"backend={backend!r} is not nvtx or torch")
    _enabled = on
    if on and (_push is None or backend != _backend):
        _push, _pop = _push_pop(backend)
    _backend = backend


def enabled() -> bool:
    """Whether ``annotate`` pushes real NVTX ranges."""
    return _enabled


def annotate(name: str):
    """Context manager for an NVTX range named ``name`` (a no-op unless enabled)."""
    return _Range(name) if _enabled else _NOOP


if _enabled:
    enable(True, _backend)
