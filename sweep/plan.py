"""The plan of a study: the composed Hydra config resolved once into typed, checked values.

Everything a study needs (device, base design, workload, space, objectives, storage, results
folder) is resolved and checked here, before any trial: bad input is refused with the field named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zoo import ModelConfig

from .analysis.hardware import HardwareSpec, load_spec
from .env import REPO, detect_device, slug
from .space import SAMPLERS

ROW_OBJECTIVES = {
    "decode_tok_s", "prefill_tok_s", "ttft_ms", "decode_tpot_ms", "prefill_mfu_vs_measured",
    "prefill_mfu_vs_datasheet", "decode_mbu_vs_measured", "decode_mbu_vs_datasheet",
    "peak_mem_bytes", "kv_bytes_per_token", "params_non_embedding", "params_total",
    "decode_j_per_token", "prefill_j_per_token",
}



@dataclass
class Plan:
    """Everything a study needs, resolved from the Hydra config before any trial runs."""

    name: str
    storage: str
    base: ModelConfig
    workload: dict
    space: dict
    objectives: list
    directions: list
    sampler: str
    n_trials: int | None
    device: dict
    mode: str
    spec: HardwareSpec
    results: Path
    seed: int = 0
    weights: str | None = None
    fault: str | None = None
    profile: dict = field(default_factory=dict)
    experiment: str = "baseline"
    quiet: bool = False
    constraints: dict = field(default_factory=dict)
    workers: int = 1
    gpus: list | None = None
    queue_only: bool = False  # workers > 1 on a grid: run enqueued designs only


def plan_from_config(cfg) -> Plan:
    """Resolve a composed Hydra config into a ``Plan`` (device, CPU fallback, names, storage).

    Raises:
        DesignError: the base model is invalid. ValueError: unknown objective, sampler, mode.
    """
    from omegaconf import OmegaConf

    c = OmegaConf.to_container(cfg, resolve=True)
    device = detect_device(c["device"])
    model, wl = dict(c["model"]), dict(c["workload"])
    exp = c.get("experiment") or {}
    space = exp.get("space") or {}
    constraints = exp.get("constraints") or {}
    if device["type"] == "cpu" and c["cpu"]["enabled"]:
        if model.get("name") != c["cpu"]["model"] and not c.get("quiet"):
            print(f"no GPU visible: running the CPU fallback (model={c['cpu']['model']}, "
                  f"workload={c['cpu']['workload']['name']}); cpu.enabled=false runs the "
                  "configured model on the CPU", flush=True)
        model = ModelConfig.from_name(c["cpu"]["model"]).to_dict()
        wl = dict(c["cpu"]["workload"])
        if exp.get("space_cpu") is not None:
            space = exp["space_cpu"]
        if exp.get("constraints_cpu") is not None:
            constraints = exp["constraints_cpu"]
    base = ModelConfig.from_dict(model)
    base.validate(device)
    prof = c.get("profile") or {}
    if prof.get("nsys"):
        from .measure import nsys

        if (why := nsys.available()) is not None:
            raise RuntimeError(f"profile={prof.get('name')} needs Nsight Systems: {why}")
    if prof.get("ncu") and device["type"] != "cuda" and not c.get("quiet"):
        print("profile=ncu on a CPU run: the ncu columns will be NaN with the reason", flush=True)
    objectives, directions = list(c["study"]["objectives"]), list(c["study"]["directions"])
    unknown = [o for o in objectives if o not in ROW_OBJECTIVES]
    if unknown:
        raise ValueError(f"unknown objective(s) {unknown}; choose from "
                         f"{', '.join(sorted(ROW_OBJECTIVES))}")
    if len(objectives) != len(directions) or any(d not in ("maximize", "minimize")
                                                   for d in directions):
        raise ValueError("study.directions must give maximize or minimize for each objective")
    nvml_only = [o for o in objectives if o.endswith("_j_per_token")]
    if nvml_only and not prof.get("nvml"):
        raise ValueError(f"objective(s) {nvml_only} need energy from NVML: add profile=nvml "
                         "(or profile=ncu/full)")
    from zoo import counts as _counts

    known = set(_counts.summary(base, 1, 1, 1))
    bad = sorted(set(constraints) - known)
    if bad:
        raise ValueError(f"unknown constraint figure(s) {bad}; choose from {', '.join(sorted(known))}")
    for key, band in constraints.items():
        if not isinstance(band, dict) or not set(band) <= {"low", "high"} or not band:
            raise ValueError(f"constraint {key!r} must be a band {{low: ..., high: ...}}, got {band}")
    if c["study"]["sampler"] not in SAMPLERS:
        raise ValueError(f"study.sampler={c['study']['sampler']!r} is not one of "
                         f"{', '.join(SAMPLERS)}")
    mode = c["mode"]
    if mode == "auto":
        mode = "cudagraph" if device["type"] == "cuda" else "eager"
    hw = c["hardware"].get("name", "auto")
    spec = load_spec(hw, device["name"]) if hw == "auto" else HardwareSpec(**c["hardware"])
    name = c["study"]["name"] or "-".join([
        exp.get("name", "baseline"), base.name, spec.name,
        f"b{wl['batch']}-p{wl['prompt_len']}-n{wl['new_tokens']}", mode])
    results_root = Path(c["results_dir"])
    if not results_root.is_absolute():
        results_root = REPO / results_root
    workers = int(c["sweep"]["workers"])
    if workers < 1:
        raise ValueError(f"sweep.workers={workers} must be at least 1")
    gpus = c["sweep"]["gpus"]
    if workers > 1 and device["type"] == "cuda":
        import torch

        visible = list(range(torch.cuda.device_count()))
        gpus = list(gpus) if gpus is not None else visible
        if len(gpus) < workers:
            raise ValueError(f"sweep.workers={workers} needs as many GPUs; {len(gpus)} given/visible "
                             f"({gpus}): two measurements must never share a GPU")
    default = (f"sqlite:///{results_root / 'optuna.db'}" if workers == 1
               else str(results_root / "optuna.journal"))
    storage = c["study"]["storage"] or default
    return Plan(name=name, storage=storage, base=base, workload=wl, space=space,
                objectives=objectives, directions=directions, sampler=c["study"]["sampler"],
                n_trials=c["study"]["n_trials"], device=device, mode=mode, spec=spec,
                results=results_root / slug(name), seed=c["seed"], weights=c.get("weights"),
                fault=c.get("fault"), profile=dict(prof),
                experiment=exp.get("name", "baseline"), quiet=c.get("quiet", False),
                constraints=constraints, workers=workers, gpus=gpus)
