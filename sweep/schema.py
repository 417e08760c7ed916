"""Structured (typed) Hydra config of the sweep app (optimum-benchmark style).

The groups mirror the code's parts: ``model`` (``zoo.ModelConfig`` fields, checked by
``ModelConfig.from_dict``/``validate``), ``workload``, ``hardware``, ``profile``, ``experiment``,
``study`` and ``switches`` (``kernels.switches.Switches``: the kernel switches that change a
figure). The schema is registered in Hydra's ConfigStore as ``sweep_schema`` and named first in
``conf/config.yaml``'s defaults, so an override with a wrong type or an unknown key fails with
Hydra's error naming it.

The command line's overrides, before the app composes them (``sweep.__main__``,
``sweep.cli.advise``): a ``ModelConfig`` field a preset's file does not list taken as a field
(``with_model_fields``), and an unknown key, group or option, a wrong type or a malformed override
refused with one ``error:`` line naming it, exit code 2 (``refuse_bad_overrides``). After it
composes them: the user's overrides of the ``model`` and ``workload`` groups, which the CPU
fallback carries over to its own model and workload (``model_overrides``,
``workload_overrides``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from kernels.switches import Switches

from .common.env import CONF


@dataclass
class WorkloadConf:
    """What each trial runs: ``batch`` sequences, a ``prompt_len`` prefill, ``new_tokens`` generated.

    ``warmup`` and ``repeats`` count whole prefills and whole decode loops; ``timeout_s`` bounds the
    trial's child process (s). ``routing_skew``: how a mixture-of-experts design's tokens spread
    over its experts, the Zipf exponent ``s`` of their prior (``zoo.routing``: each token's experts
    drawn from ``p_e ~ (e + 1)^-s``); 0 is the router as built. ``routing``: ``router`` (the
    default: at ``routing_skew`` 0 the router as built, whose random weights route a decode step
    near uniformly but can send most of a long prompt's tokens to a few experts, about a quarter of
    them on Qwen3-30B-A3B's and OLMoE's shapes: ``results/reference/moe_h100.md``) or ``uniform``
    (each token's experts drawn uniformly, the Zipf prior of exponent 0: what a trained,
    load-balanced router spreads, and what the performance model prices at ``routing_skew`` 0;
    needs ``routing_skew`` 0).
    """

    name: str = "default"
    batch: int = 1
    prompt_len: int = 512
    new_tokens: int = 128
    warmup: int = 3
    repeats: int = 10
    timeout_s: float = 900.0
    routing_skew: float = 0.0
    routing: str = "router"


@dataclass
class StudyConf:
    """The Optuna study. ``storage`` None means ``sqlite:///results/optuna.db`` (one worker) or the
    journal file ``results/optuna.journal`` (``sweep.workers`` > 1); a path ending in ``.journal``
    (or ``journal:PATH``) is Optuna's JournalStorage file backend, any other URL an RDB
    (``postgresql://user@host/db`` for workers on several hosts). ``n_trials`` None
    means the grid size (grid sampler) or 20. ``n_trials`` counts finished trials in total, so a
    re-run resumes to the same target. ``sampler``: auto (grid when the space is all categorical),
    grid, tpe, nsga2, random. ``predict``: a predict-only study: no model is built, every design's
    figures are the performance model's on the ``hardware`` spec (``sweep.analysis.targets``), each
    row saying its ``prediction_basis``."""

    name: str | None = None
    storage: str | None = None
    n_trials: int | None = None
    sampler: str = "auto"
    predict: bool = False
    objectives: list[str] = field(default_factory=lambda: ["decode_tok_s", "params_non_embedding"])
    directions: list[str] = field(default_factory=lambda: ["maximize", "maximize"])


@dataclass
class ExperimentConf:
    """A design space over the base ``model``: each ``space`` entry is a parameter
    (``{choices: [...]}``, ``{divisors_of: field}``, ``{low, high, step, log}``, or ``{choices:
    {label: {field: value, ...}}}`` for bundles). Keys are ModelConfig fields, ``batch`` /
    ``prompt_len`` (workload), or bundle labels. ``space_cpu`` replaces ``space`` on the CPU
    fallback. ``constraints`` maps an analytic figure of the design (``zoo.counts.summary`` names:
    ``params_non_embedding``, ``kv_bytes_per_token``, ``weight_bytes``, ``kv_cache_bytes``, ...)
    to a band ``{low, high}``; a design outside it is pruned before any GPU work, the reason kept
    (``constraints_cpu`` replaces it on the CPU fallback: the same figures' bands for the tiny
    model; a figure dropped from ``constraints`` is dropped there too)."""

    name: str = "baseline"
    description: str = ""
    space: dict[str, Any] = field(default_factory=dict)
    space_cpu: dict[str, Any] | None = None
    constraints: dict[str, Any] = field(default_factory=dict)
    constraints_cpu: dict[str, Any] | None = None


@dataclass
class CpuFallbackConf:
    """Where no GPU is visible, run this small model preset and workload instead (``enabled``),
    and price the study's real designs (the configured model, workload and ``space``) on each
    GPU of ``predict_on`` (hardware specs) from its calibration shipped with the package, beside
    the tiny measurement (``predicted_<target>.csv``; ``[]`` for none)."""

    enabled: bool = True
    model: str = "tiny"
    predict_on: list[str] = field(default_factory=lambda: ["h100_sxm"])
    workload: WorkloadConf = field(default_factory=lambda: WorkloadConf(
        name="cpu", batch=2, prompt_len=64, new_tokens=16, warmup=1, repeats=3, timeout_s=300))


# the CPU fallback's stand-in for a mixture of experts on its tiny model (moe_vs_dense's space_cpu)
TINY_EXPERTS, TINY_ACTIVE, TINY_EXPERT_FFN_DIM = 8, 2, 32


def cpu_stand_in(configured, cpu_model: str) -> dict:
    """The fields that make the CPU fallback's ``tiny`` model carry the structure of the
    configured design (a ``zoo.ModelConfig``), the user's model overrides applied over them: a
    mixture of experts as at most ``TINY_EXPERTS`` experts of width ``TINY_EXPERT_FFN_DIM``, top
    ``TINY_ACTIVE`` (below the experts), the router's renormalisation, a shared expert and a
    first dense layer where the design has them; QK-norm. Nothing for another ``cpu.model`` (the
    user's choice) or a dense design without QK-norm."""
    if cpu_model != "tiny":
        return {}
    out = {} if configured.qk_norm == "none" else {"qk_norm": configured.qk_norm}
    if configured.moe:
        E = min(configured.n_experts, TINY_EXPERTS)
        out.update(n_experts=E, n_experts_active=min(configured.n_experts_active, TINY_ACTIVE, E),
                   expert_ffn_dim=TINY_EXPERT_FFN_DIM, router_renorm=configured.router_renorm,
                   n_shared_experts=min(configured.n_shared_experts, 1),
                   first_k_dense=min(configured.first_k_dense, 1))
    return out


@dataclass
class ProfileConf:
    """What a trial collects besides timings: ``timing`` is the cheap default; ``nvml`` (power,
    energy/token), ``nvtx`` (ranges for Nsight tools), ``torch`` (torch.profiler op table, kernel
    categories, GPU timeline, trace), ``ncu`` (Nsight Compute per stage), ``nsys`` (Nsight Systems
    per stage), ``cublaslt_log`` (cuBLASLt's GEMM log: shapes and achieved FLOP/s per shape),
    ``modules`` (kernel time per module kind, checked against the performance model).
    ``options`` holds each mode's knobs (see ``conf/profile/*.yaml``)."""

    name: str = "timing"
    nvml: bool = False
    nvtx: bool = False
    torch: bool = False
    ncu: bool = False
    nsys: bool = False
    cublaslt_log: bool = False
    modules: bool = False
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class WorkersConf:
    """``sweep.workers``: worker processes on one study. With more than one, each worker is
    pinned to one GPU (``CUDA_VISIBLE_DEVICES``; ``gpus`` lists the indices, default all
    visible), so two measurements never share a GPU; the study lives in shared storage (a
    JournalStorage file by default, or ``study.storage`` such as a PostgreSQL URL)."""

    workers: int = 1
    gpus: list[int] | None = None


@dataclass
class SweepConf:
    """Top-level config of ``python -m sweep``."""

    model: dict[str, Any] = field(default_factory=dict)
    workload: WorkloadConf = field(default_factory=WorkloadConf)
    hardware: dict[str, Any] = field(default_factory=dict)
    profile: ProfileConf = field(default_factory=ProfileConf)
    experiment: ExperimentConf = field(default_factory=ExperimentConf)
    study: StudyConf = field(default_factory=StudyConf)
    cpu: CpuFallbackConf = field(default_factory=CpuFallbackConf)
    sweep: WorkersConf = field(default_factory=WorkersConf)
    switches: Switches = field(default_factory=Switches)  # kernel switches (kernels.switches)
    device: str = "auto"
    mode: str = "auto"
    seed: int = 0
    weights: str | None = None
    calibration: str | None = None  # a calibration .json: this device's as is, another transferred
    # auto: measure the calibration entries a study needs and its cache lacks (or measured under
    # other kernels); frozen: measure none, flag predictions from stale entries
    calibration_policy: str = "auto"
    fault: str | None = None
    results_dir: str = "results"
    # the device caches (calibration, ceilings, tile choices); None: under results_dir. Where they
    # live changes no figure: an entry is used only when its device and fingerprint match
    cache_dir: str | None = None
    quiet: bool = False


def register() -> None:
    """Register the schema with Hydra's ConfigStore (idempotent)."""
    ConfigStore.instance().store(name="sweep_schema", node=SweepConf)


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
    from .common.env import work_path

    register()  # the typed schema conf/config.yaml names first (idempotent)

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose(config_name="config", overrides=list(argv))
        for key in ("results_dir", "cache_dir"):  # Hydra makes its run folder there first
            if cfg.get(key):
                writable_dir(work_path(cfg[key]), key)
        if why := unknown_appended(argv):
            raise ValueError(why)
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
        if len(path) == 1 and path[0] in groups:
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
