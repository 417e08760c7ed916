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

from .common.entry import STDOUT_CLOSED, guard_stdout, stdout_gone
from .common.env import CONF
from .config.overrides import refuse_bad_overrides, with_model_fields
from .config.schema import register

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
    from .common.interrupts import sigterm_interrupts
    from .report.tables import summary_table
    from .storage import is_storage_error, shown, storage_error
    from .study import run

    restore = sigterm_interrupts()  # SIGTERM ends the whole run as Ctrl-C does, not only trials
    try:
        study, df = run(plan)
    except KeyboardInterrupt as e:
        print(f"interrupted ({str(e) or 'Ctrl-C'}): every finished design is kept in {shown(plan.storage)} "
              f"and {plan.results}/; a design that was running is queued again; re-run the same "
              "command to resume", file=sys.stderr)
        # 128 + the signal, as a shell reports it (a closed pipe: SIGPIPE's)
        sys.exit(143 if "SIGTERM" in str(e) else 141 if STDOUT_CLOSED in str(e) else 130)
    except (RuntimeError, DesignError) as e:  # DesignError: a design refused once the device is
        print(f"error: {e}", file=sys.stderr)  # measured (its timeout: analysis.memory.check_time)
        sys.exit(2)
    except Exception as e:
        if not is_storage_error(e):
            raise
        print(f"error: {storage_error(plan.storage, e)}", file=sys.stderr)
        sys.exit(2)
    finally:
        restore()
    print()
    if plan.predict:  # a predict-only study's figures, memory included, are the model's
        print(f"PREDICTED on {plan.spec.name} (the performance model; nothing measured):")
    print(summary_table(df, plan.objectives))
    files = sorted(p.name for p in plan.results.iterdir() if p.is_file()
                   and not p.name.startswith(".") and p.suffix != ".pkl")
    caches = [n for n in ("calibration", "ceilings", "tuning") if plan.cache(n).exists()]
    logs = "; trials/ holds each trial's logs" if (plan.results / "trials").is_dir() else ""
    print(f"\nresults: {plan.results}/ ({', '.join(files)}{logs})"
          f"\nstudy:   {plan.name} in {shown(plan.storage)} (optuna-dashboard "
          f"{shown(plan.storage)})"
          + (f"\ncaches:  {plan.cache_root}/{{{','.join(caches)}}}/ (this device's "
             "calibration, ceilings, tile choices)" if caches else ""))
    if stdout_gone():  # the reader went away after the last design: the rest to devnull
        sys.exit(141)
    if no_design_completed(df):
        states = df["state"].value_counts().to_dict() if df is not None and "state" in df else {}
        counted = ", ".join(f"{n} {s}" for s, n in states.items()) or "none ran"
        print(f"error: no design of the study completed ({counted}): see each row's fail_reason "
              "above", file=sys.stderr)
        sys.exit(1)


def no_design_completed(df) -> bool:
    """Whether a study's trials table holds no COMPLETE design (then the command exits 1)."""
    return df is None or df.empty or "state" not in df or not (df["state"] == "COMPLETE").any()


if __name__ == "__main__":
    guard_stdout()
    sys.argv[1:] = with_model_fields(sys.argv[1:])
    refuse_bad_overrides(sys.argv[1:])
    main()
