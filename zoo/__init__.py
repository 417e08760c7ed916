"""designzoo model zoo: one parametric decoder-only transformer, its configs and analytic counts.

``ModelConfig``, ``DesignError``, ``presets`` and ``TINY`` import without torch (a design is
checked and refused before torch loads: ``python -m sweep`` answers bad input in about a
second); ``Transformer``, ``Generator`` and ``generate`` import torch on first use (PEP 562).
"""

from .config import TINY, DesignError, ModelConfig, presets

__all__ = ["TINY", "DesignError", "Generator", "ModelConfig", "Transformer", "generate", "presets"]

_LAZY = {"Transformer": "model", "Generator": "generate", "generate": "generate"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
