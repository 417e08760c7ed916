"""The command line's overrides, checked before the app composes them (``sweep.__main__``,
``sweep.cli.advise``): a ``ModelConfig`` field a preset's file does not list taken as a field
(``with_model_fields``), and an unknown key, group or option, a wrong type or a malformed override
refused with one ``error:`` line naming it, exit code 2 (``refuse_bad_overrides``).
"""

from __future__ import annotations

import sys

from .common.env import CONF


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
    if any(a.startswith(("-", "hydra.", "+hydra.", "++hydra.")) for a in argv):
        return
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from .common.atomic import writable_dir
    from .common.env import CONF, work_path
    from .schema import register

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
    import re

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from zoo.errors import closest

    m = re.search(r"Could not override '([\w.]+)'", why)
    if not m or not re.search(r"Key '\w+' (is )?not in", why) or "." not in m.group(1):
        return None
    group, leaf = m.group(1).rsplit(".", 1)
    rest = [a for a in argv if not a.lstrip("+~").startswith(m.group(1) + "=")]
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            node = OmegaConf.select(compose(config_name="config", overrides=rest), group)
    except Exception:  # the other overrides fail too: Hydra's own words, then
        return None
    if node is None or not hasattr(node, "keys"):
        return None
    if leaf in node:  # the key is there: a dict value merged into an entry of another shape
        value = next((a.split("=", 1)[1] for a in argv
                      if a.lstrip("+").startswith(m.group(1) + "=")), "VALUE")
        return (f"{m.group(1)}: the value {value} is merged into the entry there "
                f"({OmegaConf.to_container(node[leaf]) if hasattr(node[leaf], 'keys') else node[leaf]}), "
                f"not put in its place; to replace the entry: '~{m.group(1)}' "
                f"'+{m.group(1)}={value}'")
    return (f"{m.group(1)}: {group} has no field {leaf!r}"
            + closest(leaf, [str(k) for k in node.keys()], prefix=f"{group}."))
