"""A study's identity: everything that changes its figures, kept with the stored study (a study
is resumed only under the same identity, ``sweep.storage.check_identity``) and hashed into its
default name, so that a changed command starts a new study."""

from __future__ import annotations

from pathlib import Path

from kernels.switches import Switches
from zoo import ModelConfig

from ..analysis.hardware import HardwareSpec, load_spec
from ..common import row
from ..common.env import triton_interpret


def identity(base: ModelConfig, wl: dict, mode: str, weights: str | None, spec: HardwareSpec,
             device: dict, profile: dict, seed: int, space: dict, constraints: dict,
             objectives: list, switches: Switches | None = None) -> dict:
    """A study's identity: everything that changes its figures. The base design (kernels and KV
    format included), the workload, the decode mode, the kernel switches, the weights (resolved
    path), the hardware spec and device, the profile, the seed, and the space, constraints and
    objectives that decide which designs it holds (``sweep.plan`` adds an injected ``fault`` and a
    ``calibration_policy`` other than ``auto`` where set). ``n_trials`` and the output folder are
    not part of it. A stored study is resumed only under the same identity
    (``sweep.storage.open_study``)."""
    ident = {"base_model": base.identity_dict(),
             # routing_skew and routing only when set: every other study keeps its identity
             "workload": {k: wl[k] for k in sorted(wl)
                          if k != "name" and (k != "routing_skew" or wl[k])
                          and (k != "routing" or wl[k] != "router")},
             "mode": mode, "weights": str(Path(weights).resolve()) if weights else None,
             "hardware_spec": spec.name, "device": device["name"], "profile": profile,
             "seed": seed, "space": space, "constraints": constraints, "objectives": objectives}
    ident["switches"] = (switches or Switches()).to_dict()
    if triton_interpret():  # only when set: the identity of every other study stays as it was
        ident["triton_interpret"] = True
    return ident


def changed_from_defaults(spec: HardwareSpec, objectives: list, directions: list) -> dict:
    """The identity's entries for what a command changed that a study's name alone would not
    tell apart, only when changed (every other study keeps its identity): the hardware spec's
    fields set by ``hardware.FIELD=...`` (against its file), and directions other than each
    objective's own (``sweep.common.row.COLUMNS``; Optuna keeps one study's directions)."""
    out: dict = {}
    try:
        shipped = load_spec(spec.name)
    except KeyError:  # a spec of no file: all of it
        shipped = None
    changed = {k: v for k, v in spec.__dict__.items()
               if shipped is None or _text(getattr(shipped, k, None)) != _text(v)}
    if changed:
        out["hardware_fields"] = changed
    natural = [getattr(row.COLUMNS.get(o), "direction", None) for o in objectives]
    if any(n is None or d != n + "imize" for d, n in zip(directions, natural)):
        out["directions"] = list(directions)
    return out


def _text(v) -> str:
    """A value as canonical JSON: NaN equal to NaN (a spec's unstated figure), dicts by key."""
    import json

    return json.dumps(v, sort_keys=True, default=str)


def identity_hash(ident: dict) -> str:
    """Eight hex digits of the SHA-256 of ``ident`` (canonical JSON); part of the default name."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:8]
