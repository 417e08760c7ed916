"""designzoo model zoo: one parametric decoder-only transformer, its configs and analytic counts.

``ModelConfig``, ``DesignError``, ``presets`` and ``TINY`` import without torch (a design is
checked and refused before torch loads: ``python -m sweep`` answers bad input in about two
seconds); ``Transformer``, ``Generator`` and ``generate`` import torch on first use (PEP 562).
``zoo.generate`` is the function, as it was when it was imported eagerly; the module is
``sys.modules["zoo.generate"]`` (``from zoo.generate import Generator`` works as ever).
"""

import sys
import types

from . import ffn  # noqa: F401 - registers the FFN kinds a design's ffn_type names
from .config import TINY, DesignError, ModelConfig, presets

__all__ = ["TINY", "DesignError", "Generator", "ModelConfig", "Transformer", "generate", "presets"]

_LAZY = {"Transformer": "model", "Generator": "generate", "generate": "generate"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """The package's module type: importing the submodule ``zoo.generate`` does not rebind the
    name ``generate`` (the function) to the module."""

    def __setattr__(self, name, value):
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
