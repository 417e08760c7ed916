"""The command line's overrides of the sweep app (``sweep.config.schema``'s typed config).

Before the app composes them (``sweep.__main__``, ``sweep.cli.advise``): a ``ModelConfig`` field a
preset's file does not list taken as a field (``with_model_fields``), and an unknown key, group or
option, an appended key the schema has no field for, a wrong type or a malformed override refused
with one ``error:`` line naming it, exit code 2 (``refuse_bad_overrides``). After it composes
them: the ``model`` group's design (a preset, a file of the user's, or ``+model.hf_config=PATH``:
a ``config.json`` as transformers writes it; ``model_group``), and the user's overrides of the
``model`` and ``workload`` groups, which the CPU fallback carries over to its own model and
workload (``model_overrides``, ``workload_overrides``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from ..common.env import CONF
from .schema import SweepConf, WorkloadConf, register


def with_model_fields(argv: list[str]) -> list[str]:
    """``argv`` with each plain ``model.FIELD=VALUE`` of a ``zoo.ModelConfig`` field written
    ``++model.FIELD=VALUE`` (set, whether the preset's file lists the field or not: a preset
    lists what its ``config.json`` says, so ``model.n_experts=4`` or ``model.qk_norm=head`` on a
    dense preset would otherwise be refused as no field); a misspelled field is left for
    ``refuse_bad_overrides`` to name."""
    import dataclasses

    from zoo import ModelConfig

    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    out = []
    for a in argv:
        key = a.split("=", 1)[0]
        if "=" in a and key.startswith("model.") and key.count(".") == 1 \
                and key.split(".", 1)[1] in fields:
            a = "++" + a
        out.append(a)
    return out


def refuse_bad_overrides(argv: list[str]) -> None:
    """Compose ``conf/`` with the command line's overrides first, as the app will: an unknown
    key, group or option, a wrong type or a malformed override ends here with one ``error:`` line
    naming it and exit code 2, before any work (Hydra's own report exits 1 with a traceback
    hint). Flags and ``hydra.*`` overrides are left to Hydra."""
    if why := unknown_appended([a for a in argv if not a.startswith("-")]):
        print(f"error: {why}", file=sys.stderr)  # needs no composing: before the flags' return
        sys.exit(2)
    if any(a.startswith(("-", "hydra.", "+hydra.", "++hydra.")) for a in argv):
        return
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ..common.atomic import writable_dir
    from ..common.env import work_path

    register()  # the typed schema conf/config.yaml names first (idempotent)

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose(config_name="config", overrides=list(argv))
        for key in ("results_dir", "cache_dir"):  # Hydra makes its run folder there first
            if cfg.get(key):
                writable_dir(work_path(cfg[key]), key)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except (HydraException, OmegaConfBaseException) as e:
        why = str(e).strip()
        cause = str(e.__cause__ or "").strip().splitlines()
        if cause and cause[0] not in why:  # Hydra wraps the reason: "Value 'abc' ... Integer"
            why += f": {cause[0]}"
        print(f"error: {_misspelled(why, argv) or _one_line(why)}", file=sys.stderr)
        sys.exit(2)


def unknown_appended(argv: list[str]) -> str | None:
    """The reason to refuse an override that appends (``+KEY=`` / ``++KEY=``) a key the typed
    schema has no field for (Hydra adds it to any group: ``+study.n_trails=3`` ran the default
    trial count), with the nearest field; None when every appended key is a field, a group's
    option (``+experiment=NAME``) or inside a free-form group (``model``, ``hardware``, a space:
    checked by their own readers)."""
    import dataclasses
    import typing

    from zoo.errors import closest

    groups = {p.name for p in CONF.iterdir() if p.is_dir()}
    for arg in argv:
        if not arg.startswith("+"):
            continue
        key = arg.lstrip("+").split("=", 1)[0]
        path = key.split(".")
        if (len(path) == 1 and path[0] in groups) or path[0] == "hydra":  # Hydra's own
            continue
        node: Any = SweepConf
        for i, part in enumerate(path):
            if not dataclasses.is_dataclass(node):
                break
            hints = typing.get_type_hints(node)
            if part not in hints:
                where = ".".join(path[:i])
                return (f"unknown key {key}: {where or 'the config'} has no field {part!r}"
                        + closest(part, hints, f"{where}." if where else ""))
            node = hints[part]
    return None


def _one_line(why: str) -> str:
    """Hydra's "Could not find 'hardware/nosuch'" with its options listed one per line and its
    config search path: the reason and the options on one line, the search path left out."""
    head, _, rest = why.partition("\n\nAvailable options in ")
    if not rest:
        return why
    group, _, listed = rest.partition(":\n")
    options = [o.strip() for o in listed.split("Config search path:")[0].splitlines() if o.strip()]
    return f"{head} (options of {group.strip(chr(39))}: {', '.join(options)})"


def _misspelled(why: str, argv: list[str]) -> str | None:
    """For Hydra's "Could not override 'model.n_kv_head' ... not in ...": the key named as no
    field of its group, with the nearest field (``did you mean model.n_kv_heads?``), in place of
    Hydra's advice to append it with ``+`` (which the design then refuses); else None."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from zoo.errors import closest

    m = re.search(r"Could not override '([\w.]+)'", why)
    if not m or not re.search(r"Key '\w+' (is )?not in", why):
        return None
    group, _, leaf = m.group(1).rpartition(".")
    rest = [a for a in argv if not a.lstrip("+~").startswith(m.group(1) + "=")]
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            root = compose(config_name="config", overrides=rest)
    except Exception:  # the other overrides fail too: Hydra's own words, then
        return None
    if not group:  # a top-level name (``hardwre=h200``): no config group or setting of the app
        return (f"{leaf}: no config group or setting of that name"
                + closest(leaf, [str(k) for k in root.keys()]))
    node = OmegaConf.select(root, group)
    if node is None and "." not in group:  # ``studdy.n_trials=3``: the group itself misspelled
        return (f"{m.group(1)}: no config group or setting {group!r}"
                + closest(group, [str(k) for k in root.keys()]))
    if node is None or not hasattr(node, "keys"):
        return None
    if leaf in node:  # the key is there: a dict value merged into an entry of another shape
        value = next((a.split("=", 1)[1] for a in argv
                      if a.lstrip("+").startswith(m.group(1) + "=")), "VALUE")
        return (f"{m.group(1)}: the value {value} is merged into the entry there "
                f"({OmegaConf.to_container(node[leaf]) if hasattr(node[leaf], 'keys') else node[leaf]}), "
                f"not put in its place; to replace the entry: '~{m.group(1)}' "
                f"'+{m.group(1)}={value}'")
    if m.group(1) == "model.hf_config":  # no field of a design: a file read in its place
        return "model.hf_config is added to the model group: +model.hf_config=PATH"
    return (f"{m.group(1)}: {group} has no field {leaf!r}"
            + closest(leaf, [str(k) for k in node.keys()], prefix=f"{group}."))


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


def model_group(model: dict, named=()) -> tuple[dict, dict]:
    """``(fields, user's overrides)`` of a composed ``model`` group: with ``+model.hf_config=PATH``
    the design read from that ``config.json`` (transformers' format) with the command's other
    fields over it (``named``, or those unlike the composed group's preset); else the group as
    composed (a preset's name with only some fields filled from the preset), and
    ``model_overrides``.

    Raises:
        ValueError: no such config file, or an ``hf_config`` that is not a path (empty, null, a
            list); a model of no preset that leaves its shape unset.
        DesignError: a family or feature the zoo does not run (its key named)."""
    if "hf_config" in model and (model["hf_config"] in ("", None) or isinstance(
            model["hf_config"], bool | list | dict)):  # "+model.hf_config=$CFG" with $CFG unset
        raise ValueError(f"model.hf_config={model['hf_config']!r} is not a path: +model.hf_config="
                         "PATH names a config.json, or the folder holding one")
    if hf := model.pop("hf_config", None):  # the user's fields: named, or (outside the Hydra
        given = model_overrides(model, named)  # app: advise) those unlike the group's preset's
        fields = _from_hf(hf, given)
        return fields, {k: fields[k] for k in given}
    model = _complete(model)
    return model, model_overrides(model, named)


def _from_hf(path: str, fields: dict) -> dict:
    """The design of ``+model.hf_config=PATH`` (a ``config.json`` or the folder holding one,
    ``ModelConfig.from_hf``) with the command's other ``model.X`` fields set over it.

    Raises:
        ValueError: no such file. DesignError: a family or feature the zoo does not run (its key
            named) or an impossible design."""
    from zoo import ModelConfig
    from zoo.errors import DesignError

    from ..common.env import work_path

    # a relative path from the folder the command runs in, else from designzoo's own (WORK)
    path = str(path)  # a folder named 123 (a checkpoint's step) comes from Hydra as an int
    tried = list(dict.fromkeys([Path(path).absolute(), work_path(path)]))
    for p in tried:
        if (p / "config.json" if p.is_dir() else p).is_file():
            try:
                return ModelConfig.from_hf(p, **fields).to_dict()
            except DesignError as e:  # a design field as the file's key, and the file (with
                text = str(e).removeprefix(f"{p}: ")  # the command's fields the error names)
                mine = [f"model.{k}={v}" for k, v in fields.items() if re.search(rf"\b{k}\b", text)]
                raise DesignError(f"{p}{' with ' + ', '.join(mine) if mine else ''}: "
                                  f"{_hf_keys(text, fields)}") from None
    raise ValueError(f"model.hf_config={path}: no such file (a config.json, or the folder "
                     f"holding one): looked for {' and '.join(map(str, tried))}")


# a design's fields as transformers' config.json names them (Llama / Qwen / Mistral families)
HF_KEYS = {"d_model": "hidden_size", "n_heads": "num_attention_heads",
           "n_kv_heads": "num_key_value_heads", "n_layers": "num_hidden_layers",
           "ffn_dim": "intermediate_size", "max_seq_len": "max_position_embeddings"}


def _hf_keys(text: str, given: dict) -> str:
    """``text`` (a design's refusal) with each design field the file set named by its key too:
    ``d_model/hidden_size``; a field the command set (``given``) stays as it is."""
    for field, key in HF_KEYS.items():
        if field not in given:
            text = re.sub(rf"\b{field}\b(?!/)", f"{field}/{key}", text, count=1)
    return text


def _complete(model: dict) -> dict:
    """A ``model`` group as composed: a preset's name with only some fields (a file of the user's
    naming a shipped ``zoo/configs/<name>.json``) filled from that preset; a design of no preset
    must set its shape.

    Raises:
        ValueError: a model of no preset that leaves a shape field unset (it ran as the default
            design under the given name)."""
    from zoo import ModelConfig, presets

    shape = ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "vocab_size")
    if not (unset := [k for k in shape if k not in model]):
        return model
    name = model.get("name")
    if name in presets():
        return {**ModelConfig.from_name(name).to_dict(), **model}
    raise ValueError(f"model {name!r} sets no {', '.join('model.' + k for k in unset)} and is no "
                     f"preset ({', '.join(presets())}): a model group names its whole shape, or "
                     "+model.hf_config=PATH reads a config.json")


def model_overrides(model: dict, named=()) -> dict:
    """The fields of a composed ``model`` group that differ from its preset, and those the
    command line ``named`` (the user's ``model.X=...`` and ``+model.X=...`` overrides); all of
    them for a model that is no preset."""
    from zoo import ModelConfig, presets  # (here: a refusal before composing imports no torch)

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
