"""A registry of component kinds (``zoo.ffn``'s FFN kinds, ``zoo.attn``'s attention kinds): each
kind registered once under its name; its ``nn.Module`` class named by ``"package.module:Class"``
and imported when a model is built. Torch-free."""

from __future__ import annotations

import importlib


class Kinds:
    """The kinds of one component, by name (``what`` names the component in errors)."""

    def __init__(self, what: str):
        self.what = what
        self._kinds: dict = {}

    def register(self, k) -> None:
        """Register kind ``k`` under ``k.name``.

        Raises:
            ValueError: another kind of that name is registered already.
        """
        if k.name in self._kinds and self._kinds[k.name] != k:
            raise ValueError(f"{self.what} {k.name!r} is registered already")
        self._kinds[k.name] = k

    def get(self, name: str):
        """The kind registered as ``name``.

        Raises:
            KeyError: none is.
        """
        return self._kinds[name]

    def names(self) -> tuple[str, ...]:
        """The registered names."""
        return tuple(self._kinds)

    def ranges(self) -> dict[str, str]:
        """Every registered kind's profiler ranges -> module kind."""
        return {r: m for k in self._kinds.values() for r, m in k.ranges}


def module_class(path: str):
    """The class named by ``"package.module:Class"`` (its module imported now)."""
    mod, cls = path.split(":")
    return getattr(importlib.import_module(mod), cls)
