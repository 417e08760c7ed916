"""Shared test helpers: compose the sweep's Hydra config in-process."""

from pathlib import Path

from hydra import compose, initialize_config_dir

from sweep.schema import register

CONF = str(Path(__file__).resolve().parent.parent / "conf")
# the device caches (calibration, ceilings, tile choices) the tests' studies share: one CPU
# calibration per session (``conftest.shared_device_cache``), not one per test's results folder
CACHE: Path | None = None


def compose_cfg(overrides: list[str]):
    register()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose(config_name="config", overrides=overrides)


def tiny_overrides(tmp_path, *extra: str) -> list[str]:
    """A fast CPU study on the tiny model writing into ``tmp_path``."""
    return [f"results_dir={tmp_path}", f"study.storage=sqlite:///{tmp_path}/optuna.db",
            "quiet=true", "device=cpu", "cpu.workload.prompt_len=16", "cpu.workload.new_tokens=4",
            "cpu.workload.repeats=2", "cpu.workload.warmup=1",
            *([f"cache_dir={CACHE}"] if CACHE else []), *extra]


def sweep_cli(tmp_path, *over, timeout=300, env=None):
    """``python -m sweep`` on a tiny CPU study in ``tmp_path`` (``tiny_overrides`` + ``over``), in
    a child process with ``env`` (default: this one's, the repository on ``PYTHONPATH``): the
    ``CompletedProcess`` with its text output."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    env = env if env is not None else dict(os.environ, PYTHONPATH=str(repo))
    return subprocess.run([sys.executable, "-m", "sweep", *tiny_overrides(tmp_path), *over],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


def run_tiny(tmp_path, *extra):
    """Plan and run a tiny CPU study (``tiny_overrides`` + ``extra``): ``(plan, study, df)``."""
    from sweep.plan import plan_from_config
    from sweep.study import run

    plan = plan_from_config(compose_cfg(tiny_overrides(tmp_path, *extra)))
    study, df = run(plan)
    return plan, study, df
