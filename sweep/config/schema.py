"""Structured (typed) Hydra config of the sweep app (optimum-benchmark style).

The groups mirror the code's parts: ``model`` (``zoo.ModelConfig`` fields, checked by
``ModelConfig.from_dict``/``validate``), ``workload``, ``hardware``, ``profile``, ``experiment``,
``study`` and ``switches`` (``kernels.switches.Switches``: the kernel switches that change a
figure). The schema is registered in Hydra's ConfigStore as ``sweep_schema`` and named first in
``conf/config.yaml``'s defaults, so an override with a wrong type or an unknown key fails with
Hydra's error naming it.

The command line's overrides are read and checked in ``sweep.config.overrides``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from kernels.switches import Switches


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
    """Register the schema with Hydra's ConfigStore, and the ``${pid:}`` resolver that keeps two
    runs started in the same second (two workers) out of each other's Hydra run folder
    (``conf/config.yaml``'s ``hydra.run.dir``); idempotent."""
    ConfigStore.instance().store(name="sweep_schema", node=SweepConf)
    OmegaConf.register_new_resolver("pid", os.getpid, replace=True)
