"""The user's overrides of a composed config's ``model`` and ``workload`` groups: what the CPU
fallback carries over to its own model and workload (``sweep.plan``), and what its banner names.
"""

from __future__ import annotations

from zoo import ModelConfig, presets

from .common.env import CONF
from .schema import WorkloadConf


def named_overrides(group: str) -> set[str]:
    """The fields of config group ``group`` that the command line names (``group.X=...``,
    ``+group.X=...``, ``++group.X=...``), from Hydra's record of it: a value the user gave is
    theirs even where it equals the group file's (``workload.batch=1`` on the CPU fallback, whose
    own workload has batch 2). Empty outside a Hydra app (the compose API records none)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return set()
    keys = (o.split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task)
    return {k[len(group) + 1:].split(".")[0] for k in keys if k.startswith(group + ".")}


def model_overrides(model: dict, named=()) -> dict:
    """The fields of a composed ``model`` group that differ from its preset, and those the
    command line ``named`` (the user's ``model.X=...`` and ``+model.X=...`` overrides); all of
    them for a model that is no preset."""
    name = model.get("name")
    preset = ModelConfig.from_name(name).to_dict() if name in presets() else {}
    return {k: v for k, v in model.items()
            if k != "name" and (k not in preset or preset[k] != v or k in named)}


def workload_overrides(wl: dict, named=()) -> dict:
    """The fields of a composed ``workload`` that differ from its group file
    (``conf/workload/<name>.yaml`` over ``WorkloadConf``'s defaults), and those the command line
    ``named``: the user's overrides."""
    import yaml

    path = CONF / "workload" / f"{wl.get('name')}.yaml"
    group = dict(vars(WorkloadConf()), **(yaml.safe_load(path.read_text()) if path.exists() else {}))
    return {k: v for k, v in wl.items() if k != "name" and (group.get(k) != v or k in named)}
