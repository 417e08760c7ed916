"""Shared test helpers: compose the sweep's Hydra config in-process."""

from pathlib import Path

from hydra import compose, initialize_config_dir

from sweep.config.schema import register

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


def assert_decodes_like(zoo, hf, cfg, B: int, T: int, steps: int, seed: int) -> None:
    """A random prompt ``[B, T]`` (``seed``) prefilled and ``steps`` greedy decode steps of the
    zoo model (``zoo.Generator``) give ``hf``'s last-position logits, fp32 within 1e-4."""
    import torch

    from zoo import Generator

    prompt = torch.randint(0, cfg.vocab_size, (B, T),
                           generator=torch.Generator().manual_seed(seed))
    gen = Generator(zoo, B, T + steps)
    with torch.no_grad():
        ref = hf(prompt).logits[:, -1]
        torch.testing.assert_close(gen.prefill(prompt), ref, rtol=1e-4, atol=1e-4)
        seq, tok = prompt, ref.argmax(-1, keepdim=True)
        for _ in range(steps):
            seq = torch.cat([seq, tok], 1)
            ref = hf(seq).logits[:, -1]
            torch.testing.assert_close(gen.decode(tok), ref, rtol=1e-4, atol=1e-4)
            tok = ref.argmax(-1, keepdim=True)


def hf_random_model(transformers, hf_config, seed: int = 0, router_std: float | None = None,
                    experts_std: float | None = None):
    """transformers' causal LM of ``hf_config`` (a ``config.json`` dict or a config object;
    fp32, eval) from ``torch.manual_seed(seed)``, its 1-D parameters (norms, biases, sinks) moved
    off their init by N(0, 0.1) so they are tested; with ``router_std`` its MoE routers drawn from
    N(0, router_std) (transformers starts some at zero: every token would route alike), with
    ``experts_std`` its experts' weights from N(0, experts_std)."""
    import torch

    torch.manual_seed(seed)
    if isinstance(hf_config, dict):
        hf_config = transformers.AutoConfig.for_model(**hf_config)
    hf = transformers.AutoModelForCausalLM.from_config(hf_config).float().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
            elif router_std and name.endswith("mlp.gate.weight"):
                p.normal_(0.0, router_std)
            elif experts_std and "experts" in name:
                p.normal_(0.0, experts_std)
    return hf


def assert_prompt_logits_like(zoo, hf, cfg, T: int) -> None:
    """Every position's logits of a random prompt ``[2, T]`` (seed 1) through the zoo model (the
    cache set up for it) against ``hf``'s, fp32 within 1e-4."""
    import torch

    x = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(1))
    zoo.setup_cache(2, T)
    with torch.no_grad():
        torch.testing.assert_close(zoo(x, zoo.positions[:T], kv_len=T), hf(x).logits,
                                   rtol=1e-4, atol=1e-4)
