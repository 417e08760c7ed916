"""The switches that change which kernels a step launches or how their tiles are chosen.

Every figure measured or predicted for a design depends on them, so they are typed config
(``python -m sweep switches.rope_in_attention=false``), written into every results row
(``switch_<name>``) and into the study's identity. A process runs under one set
(``set_current``: the trial child sets the one its spec names before building the model); the
kernels read ``current()``, never the environment. Defaults are the fastest path measured on the
H100 (``results/reference/bench_h100_v3_dev/``).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import asdict, dataclass, fields, replace


@dataclass
class Switches:
    """Kernel switches (all booleans).

    Attributes:
        autotune: tile configs tuned per shape by Triton's autotuner (choices kept per device,
            ``kernels.tuning``); off: one fixed config per kernel (bounded compile time).
        cold_tune: the autotuners time each config after an L2 flush (``kernels.graph_timing``);
            measured no faster on the H100, off.
        gemv_prefetch: ``PREFETCH_X`` (the next activation tiles loaded a step ahead) in the
            one-row decode GEMV's autotune space (``kernels.gemv``).
        gemv_w_ahead: ``W_AHEAD`` (weight tiles loaded a step ahead by hand) in the 2-16-row
            GEMV's autotune space.
        pdl: programmatic dependent launch between the decode kernels (Hopper and later;
            ``kernels.gemv``).
        rope_in_attention: a Triton decode step's RoPE and K/V cache write inside the
            decode-attention launch (``kernels.decode_attention``), not a kernel of their own.
    """

    autotune: bool = True
    cold_tune: bool = False
    gemv_prefetch: bool = True
    gemv_w_ahead: bool = True
    pdl: bool = True
    rope_in_attention: bool = True

    @classmethod
    def from_dict(cls, d: dict | None) -> Switches:
        """From a dict (a config node, a results row's ``switches``); missing keys take the
        defaults.

        Raises:
            ValueError: an unknown switch or a value that is not a boolean (named).
        """
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown switch(es) {unknown}; known: {', '.join(sorted(known))}")
        for k, v in d.items():
            if not isinstance(v, bool):
                raise ValueError(f"switches.{k}={v!r} must be true or false")
        return cls(**d)

    def to_dict(self) -> dict:
        """``{switch name: bool}`` for every switch (the study identity's ``switches``)."""
        return asdict(self)

    def columns(self) -> dict:
        """The results-row columns: ``switch_<name>`` for each switch."""
        return {f"switch_{k}": v for k, v in asdict(self).items()}


_current = Switches()


def current() -> Switches:
    """The switches this process runs under."""
    return _current


def set_current(s: Switches) -> None:
    """Run this process under ``s`` from now on (before a model is built)."""
    global _current
    _current = s
    _on_change()


@contextlib.contextmanager
def use(**changes):
    """``with use(autotune=True): ...``: the current switches with ``changes``, restored after."""
    old = _current
    set_current(replace(old, **changes))
    try:
        yield _current
    finally:
        set_current(old)


_HOOKS: list = []


def on_change(fn):
    """Register ``fn`` to run when the switches change (a kernel's cached answer to clear)."""
    _HOOKS.append(fn)
    return fn


def _on_change() -> None:
    for fn in _HOOKS:
        fn()


@functools.cache
def names() -> tuple[str, ...]:
    """The switch names, in field order."""
    return tuple(f.name for f in fields(Switches))
