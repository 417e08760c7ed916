"""``python -m sweep [+experiment=NAME] [overrides]``: run (or resume) a design study.

Composes ``conf/`` with Hydra, resolves the device (CPU fallback to the tiny model), runs the Optuna
study (``sweep.study``) and prints the trials table. Results: ``results/<study>/trials.parquet``,
``trials.csv``, ``pareto.png``/``.html``, ``study.json``; the study itself in the Optuna storage
(``sqlite:///results/optuna.db`` by default; open it with ``optuna-dashboard <storage URL>``).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from .common.env import CONF
from .schema import register

register()


@hydra.main(version_base=None, config_path=str(CONF), config_name="config")
def main(cfg: DictConfig) -> None:
    from zoo import DesignError

    from .plan import plan_from_config

    try:  # before torch, pandas and the storage load: bad input is answered in about a second
        plan = plan_from_config(cfg)
    except (DesignError, ValueError, KeyError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    from .report.tables import summary_table
    from .storage import is_storage_error, shown, storage_error
    from .study import run

    try:
        study, df = run(plan)
    except KeyboardInterrupt as e:
        print(f"interrupted ({str(e) or 'Ctrl-C'}): every finished design is kept in {shown(plan.storage)} "
              f"and {plan.results}/; the design that was running is queued again; re-run the same "
              "command to resume", file=sys.stderr)
        sys.exit(143 if "SIGTERM" in str(e) else 130)  # 128 + the signal, as a shell reports it
    except (RuntimeError, DesignError) as e:  # DesignError: a design refused once the device is
        print(f"error: {e}", file=sys.stderr)  # measured (its timeout: analysis.memory.check_time)
        sys.exit(2)
    except Exception as e:
        if not is_storage_error(e):
            raise
        print(f"error: {storage_error(plan.storage, e)}", file=sys.stderr)
        sys.exit(2)
    print()
    print(summary_table(df))
    files = sorted(p.name for p in plan.results.iterdir() if p.is_file()
                   and not p.name.startswith(".") and p.suffix != ".pkl")
    caches = [n for n in ("calibration", "ceilings", "tuning") if plan.cache(n).exists()]
    logs = "; trials/ holds each trial's logs" if (plan.results / "trials").is_dir() else ""
    print(f"\nresults: {plan.results}/ ({', '.join(files)}{logs})"
          f"\nstudy:   {plan.name} in {shown(plan.storage)} (optuna-dashboard "
          f"{shown(plan.storage)})"
          + (f"\ncaches:  {plan.cache_root}/{{{','.join(caches)}}}/ (this device's "
             "calibration, ceilings, tile choices)" if caches else ""))
    if no_design_completed(df):
        states = df["state"].value_counts().to_dict() if df is not None and "state" in df else {}
        counted = ", ".join(f"{n} {s}" for s, n in states.items()) or "none ran"
        print(f"error: no design of the study completed ({counted}): see each row's fail_reason "
              "above", file=sys.stderr)
        sys.exit(1)


def no_design_completed(df) -> bool:
    """Whether a study's trials table holds no COMPLETE design (then the command exits 1)."""
    return df is None or df.empty or "state" not in df or not (df["state"] == "COMPLETE").any()


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
        print(f"error: {_misspelled(why, argv) or why}", file=sys.stderr)
        sys.exit(2)


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
    return (f"{m.group(1)}: {group} has no field {leaf!r}"
            + closest(leaf, [str(k) for k in node.keys()], prefix=f"{group}."))


if __name__ == "__main__":
    refuse_bad_overrides(sys.argv[1:])
    main()
