"""The plan of a study: the composed Hydra config resolved once into typed, checked values.

Everything a study needs (device, base design, workload, space, objectives, storage, results
folder) is resolved and checked here, before any trial: bad input is refused with the field named.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from kernels.switches import Switches
from zoo import DesignError, ModelConfig

from .analysis.hardware import HardwareSpec, load_spec, spec_from_config
from .analysis.memory import check_fits
from .common.atomic import writable_dir
from .common.env import WORK, detect_device, slug, work_path
from .config.identity import changed_from_defaults, identity, identity_hash
from .config.objectives import check_constraints, check_objectives
from .config.overrides import model_group, named_overrides, workload_overrides
from .config.schema import WorkloadConf, cpu_stand_in
from .space import LOWEST, SAMPLERS, check_space, check_values, sets_experts


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
    queue_only: bool = False  # a grid: run enqueued designs only
    identity: dict = field(default_factory=dict)  # what changes the study's figures (``identity``)
    calibration: str | None = None  # another device's calibration to transfer, else this one's
    predict: bool = False  # predict-only: no model built, figures from the performance model
    switches: Switches = field(default_factory=Switches)  # kernel switches (kernels.switches)
    calibration_policy: str = "auto"  # sweep.caches.calibration.POLICIES
    results_root: Path = WORK / "results"
    cache_root: Path = WORK / "results"  # the caches (calibration, ceilings, tuning) live here
    # on the CPU fallback: the configured (real) base, workload, space, constraints, mode and the
    # GPU specs to price them on (``sweep.study.shadow_predictions``)
    shadow: dict | None = None

    def cache(self, name: str) -> Path:
        """The folder of one of the device caches (under ``cache_dir``, by default
        ``results_dir``): ``calibration``, ``ceilings`` or ``tuning``."""
        return self.cache_root / name


def model_field(e: Exception) -> str:
    """A model's error message with its leading field written as the override (``model.FIELD``,
    ``zoo.errors.with_prefix``)."""
    from zoo.config import DESIGN_FIELDS
    from zoo.errors import with_prefix

    return with_prefix(str(e), DESIGN_FIELDS, "model.")


def plan_from_config(cfg) -> Plan:
    """Resolve a composed Hydra config into a ``Plan`` (device, CPU fallback, names, storage).

    Raises:
        DesignError: the base model is invalid. ValueError: a bad value, named: objective,
            direction, sampler, mode, constraint band, workload, ``n_trials``, a weights or
            calibration file, an NVML objective without ``profile=nvml``. RuntimeError: an
            ``nsys`` profile where Nsight Systems cannot run.
    """
    from omegaconf import OmegaConf

    c = OmegaConf.to_container(cfg, resolve=True)
    device = detect_device(c["device"])
    model, wl = dict(c["model"]), dict(c["workload"])
    exp = c.get("experiment") or {}
    space = exp.get("space") or {}
    constraints = exp.get("constraints") or {}
    model, model_over = model_group(model, named_overrides("model"))
    wl_over = workload_overrides(wl, named_overrides("workload"))
    try:  # as configured, checked as on a GPU; a field named as the override (model.FIELD)
        configured = ModelConfig.from_dict(model).validate()
    except DesignError as e:
        raise DesignError(model_field(e)) from None
    check_space(space, configured)  # the real space (priced on the CPU fallback too)
    predict = bool(c["study"].get("predict"))
    here = device  # this machine's device: a predict-only study on a GPU prices it by default
    if predict:  # nothing runs here: the design is checked as on the target, no CPU fallback
        device = {"type": "predict", "name": "predicted (no device)"}
    shadow = None
    targets = list(c["cpu"].get("predict_on") or [])
    for t in targets:  # each GPU the fallback prices the real designs on: named wherever it runs
        try:
            load_spec(t)
        except KeyError as e:
            raise ValueError(f"cpu.predict_on: {e.args[0] if e.args else e}") from None
    if device["type"] == "cpu" and c["cpu"]["enabled"]:
        given = {**{f"model.{k}": v for k, v in model_over.items()},
                 **{f"workload.{k}": v for k, v in wl_over.items()}}
        hw_name = c["hardware"].get("name", "auto")
        if hw_name not in ("auto", "cpu") and hw_name not in targets:
            targets.append(hw_name)
        shadow = {"base": ModelConfig.from_dict(model).resolved("cuda"), "workload": dict(wl),
                  "space": space, "constraints": constraints, "targets": targets,
                  "mode": "cudagraph" if c["mode"] == "auto" else c["mode"]}
        # the real designs are priced only where they could run: as a predict-only study checks
        check_workload(wl, shadow["base"], space, " (the real designs the CPU fallback prices)")
        stand_in = cpu_stand_in(configured, c["cpu"]["model"])
        if not c.get("quiet"):
            print(f"no GPU visible: measuring the CPU fallback (model={c['cpu']['model']}, "
                  f"workload={c['cpu']['workload']['name']}) in place of model={model.get('name')}"
                  f" (workload={wl.get('name')})"
                  + (f", carrying its structure {stand_in}" if stand_in else "")
                  + (f" with your overrides {given}" if given else "")
                  + "; cpu.enabled=false runs the configured model on the CPU"
                  + (f". The real designs are priced on {', '.join(targets)} (predicted, "
                     "beside the tiny measurement)" if targets else ""), flush=True)
        try:
            model = ModelConfig.from_name(c["cpu"]["model"], **{**stand_in, **model_over}).validate(
                device).to_dict()
        except DesignError as e:
            hint = ("; model.kernels=torch runs the torch kernels on the CPU"
                    if model_over.get("kernels") == "triton" else "")
            raise DesignError(f"{model_field(e)} (the CPU fallback applies your model overrides {model_over} "
                              f"to the {c['cpu']['model']!r} model; cpu.enabled=false runs the "
                              f"configured model instead{hint})") from None
        wl = dict(c["cpu"]["workload"], **wl_over)
        if exp.get("space_cpu") is not None:
            space = exp["space_cpu"]
        if exp.get("constraints_cpu") is not None:  # the figures the real designs still bound
            constraints = {k: v for k, v in exp["constraints_cpu"].items() if k in constraints}
    base = ModelConfig.from_dict(model)
    base.validate(None if predict else device)
    check_space(space, base)
    check_workload(wl, base, space, "" if shadow is None else (
        f" (the CPU fallback's {c['cpu']['model']!r} model and {c['cpu']['workload']['name']!r} "
        "workload with your overrides; cpu.enabled=false runs the configured ones)"))
    check_weights(c.get("weights"))
    if c["study"]["n_trials"] is not None and c["study"]["n_trials"] < 1:
        raise ValueError(f"study.n_trials={c['study']['n_trials']} must be at least 1")
    prof = c.get("profile") or {}
    if prof.get("nsys"):
        from .measure import nsys

        if (why := nsys.available()) is not None:
            raise RuntimeError(f"profile={prof.get('name')} needs Nsight Systems: {why}")
    if prof.get("ncu") and device["type"] != "cuda" and not c.get("quiet"):
        print("profile=ncu on a CPU run: the ncu columns will be NaN with the reason", flush=True)
    objectives, directions = list(c["study"]["objectives"]), list(c["study"]["directions"])
    check_objectives(objectives, directions, prof, predict)
    check_constraints([(constraints, base)] + ([(shadow["constraints"], shadow["base"])]
                                               if shadow else []))
    if c["study"]["sampler"] not in SAMPLERS:
        raise ValueError(f"study.sampler={c['study']['sampler']!r} is not one of "
                         f"{', '.join(SAMPLERS)}")
    mode = c["mode"]
    if mode == "auto":
        mode = "cudagraph" if device["type"] in ("cuda", "predict") else "eager"
    check_mode(mode, device)
    hw = c["hardware"].get("name", "auto")
    if predict and hw == "auto" and here["type"] != "cuda":
        raise ValueError("study.predict=true needs a hardware spec to predict on: hardware=<name> "
                         "(conf/hardware/*.yaml); hardware=auto prices this machine's GPU, and "
                         "there is none")
    spec = (load_spec(hw, (here if predict else device)["name"]) if hw == "auto"
            else spec_from_config(c["hardware"]))
    if predict:  # priced from the spec's stated peaks: a spec without them prices nothing
        from .analysis.targets import target_ceilings

        try:
            target_ceilings(spec, base.dtype)
        except ValueError as e:
            said = f"hardware={hw}" if hw != "auto" else f"hardware=auto ({spec.name}: here)"
            raise ValueError(f"{said}: a predict-only study prices designs from the spec's "
                             f"stated peaks, and {e}: name a spec that states them "
                             "(hardware=h100_sxm; conf/hardware/) or state it "
                             "(hardware.FIELD=...)") from None
    if not predict and hw != "auto" and not spec.describes(device):
        if shadow is None:  # a measurement's ratios name the peaks of the chip that ran it
            raise ValueError(f"hardware={hw} does not describe this device ({device['name']}): "
                             "a measured study's MFU and MBU are against its own chip's peaks "
                             f"(hardware=auto); study.predict=true hardware={hw} prices the "
                             f"designs on {hw}")
        spec = load_spec("auto", device["name"])  # the CPU fallback: hw is a target it prices
    # kernels=auto: the fastest correct path where the study runs (a predicted study: its target)
    base = base.resolved("cuda" if device["type"] == "cuda"
                         or (predict and spec.kind == "gpu") else "cpu")
    base.validate(None if predict else device)  # with its kernels resolved (int8 KV on a CPU)
    if not space:  # one design: refused here; a space's designs are checked one by one
        check_mode(mode, device, base)
    if not predict and not space:  # one design: refused here; a space's are pruned one by one
        check_fits(base, wl, device)
    switches = Switches.from_dict(c.get("switches"))
    policy = c.get("calibration_policy", "auto")
    from .caches.calibration import POLICIES

    if policy not in POLICIES:
        raise ValueError(f"calibration_policy={policy!r} is not one of {', '.join(POLICIES)}")
    ident = identity(base, wl, mode, c.get("weights"), spec, device, prof, c["seed"], space,
                     constraints, objectives, switches)
    if c.get("fault"):  # a study with injected failures is one of its own, its items checked
        from .measure.faults import parse

        parse(c["fault"])
        ident["fault"] = c["fault"]
    if policy != "auto":  # a frozen calibration leaves entries unpriced: other predictions
        ident["calibration_policy"] = policy
    if predict:
        ident["predict"] = True
    elif device["type"] == "cpu":  # a CPU's figures depend on which CPU and how many cores
        ident["cpu"] = {k: device.get(k) for k in ("processor", "threads")}
    if shadow is not None:  # the real designs the CPU fallback prices: part of what it holds
        ident["priced"] = {"base_model": shadow["base"].identity_dict(),
                           "workload": {k: v for k, v in sorted(shadow["workload"].items())
                                        if k != "name"},
                           "space": shadow["space"], "constraints": shadow["constraints"],
                           "targets": shadow["targets"], "mode": shadow["mode"]}
    ident.update(changed_from_defaults(spec, objectives, directions))
    if c.get("calibration"):
        ident["calibration"] = str(Path(c["calibration"]).resolve())
        from .analysis.calibration_store import load_file

        try:
            load_file(c["calibration"])  # both files there, the .json a calibration's
        except (OSError, ValueError) as e:
            raise ValueError(f"calibration={c['calibration']}: {e}") from None
    name = c["study"]["name"] or "-".join([
        exp.get("name", "baseline"), base.name]
        + ([shadow["base"].name] if shadow is not None else []) + [spec.name,
        f"b{wl['batch']}-p{wl['prompt_len']}-n{wl['new_tokens']}", mode]
        + (["predicted"] if predict else []) + [identity_hash(ident)])
    results_root = writable_dir(work_path(c["results_dir"]), "results_dir")
    cache_root = writable_dir(work_path(c.get("cache_dir") or c["results_dir"]),
                              "cache_dir" if c.get("cache_dir") else "results_dir")
    workers = int(c["sweep"]["workers"])
    if workers < 1:
        raise ValueError(f"sweep.workers={workers} must be at least 1")
    gpus = c["sweep"]["gpus"]
    if workers > 1 and device["type"] != "cuda" and not predict and not c.get("quiet"):
        print(f"sweep.workers={workers} on the CPU: the workers share its cores, so each row is "
              "measured beside another (contended): the mechanics, not figures to compare", flush=True)
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
    if storage.startswith("sqlite:///") and not storage.startswith("sqlite:////"):
        # a relative SQLite file lands among the results, never in the working directory
        storage = f"sqlite:///{results_root / storage.removeprefix('sqlite:///')}"
    elif storage.endswith(".journal") and not Path(storage.removeprefix("journal:")).is_absolute():
        storage = str(results_root / storage.removeprefix("journal:"))
    return Plan(name=name, storage=storage, base=base, workload=wl, space=space,
                objectives=objectives, directions=directions, sampler=c["study"]["sampler"],
                n_trials=c["study"]["n_trials"], device=device, mode=mode, spec=spec,
                results=results_root / slug(name), seed=c["seed"], weights=c.get("weights"),
                fault=c.get("fault"), profile=dict(prof),
                experiment=exp.get("name", "baseline"), quiet=c.get("quiet", False),
                constraints=constraints, workers=workers, gpus=gpus, identity=ident,
                calibration=c.get("calibration"), predict=predict, switches=switches,
                calibration_policy=policy, results_root=results_root, cache_root=cache_root,
                shadow=shadow)


# ---- checks before any work ----------------------------------------------------------------

def check_mode(mode: str, device: dict, cfg: ModelConfig | None = None) -> None:
    """Refuse a decode ``mode`` this device, or design ``cfg``, cannot run (before any GPU work).

    Raises:
        DesignError: unknown mode; ``cudagraph``/``compile`` without a CUDA device, or for a
            mixture of experts measured on one (its torch layers read their experts' token
            counts on the host: no graph captures them yet).
    """
    from zoo.modes import MODES

    if mode not in MODES:
        raise DesignError(f"mode={mode!r} is not one of auto, {', '.join(MODES)}")
    if mode != "eager" and device["type"] not in ("cuda", "predict"):
        raise DesignError(f"mode={mode} needs a CUDA GPU (this run is on the {device['type']}; "
                          "mode=eager or mode=auto runs there)")
    if mode != "eager" and cfg is not None and cfg.moe and device["type"] == "cuda" and (
            cfg.kernels == "torch" or mode == "compile"):
        raise DesignError(f"mode={mode} with n_experts={cfg.n_experts} and kernels={cfg.kernels}: "
                          + ("the MoE layers' torch path syncs with the host for its experts' "
                             "token counts, which a CUDA graph cannot capture (kernels=triton "
                             "or mode=eager)" if cfg.kernels == "torch" else
                             "the MoE kernels are not custom ops for torch.compile yet "
                             "(mode=cudagraph)"))


def check_workload(wl: dict, base: ModelConfig, space: dict, whose: str = "") -> None:
    """Refuse a workload no trial could run, once for the whole design space; ``whose`` ends the
    ``max_seq_len`` refusal (the CPU fallback's model, not the configured one, is too short).

    Raises:
        ValueError: an unknown field; ``batch``, ``prompt_len``, ``new_tokens`` or ``repeats``
            below 1, ``warmup`` below 0, ``timeout_s`` not positive, ``routing_skew`` outside
            [0, 8], ``routing`` neither ``router`` nor ``uniform`` (or ``uniform`` with a skew), a
            routing for a study none of whose designs has experts, or ``prompt_len +
            new_tokens`` over the design's ``max_seq_len`` (the space's largest choices checked).
    """
    unknown = sorted(set(wl) - {f.name for f in fields(WorkloadConf)})
    if unknown:
        raise ValueError(f"unknown workload field(s): {', '.join(unknown)} (known: "
                         f"{', '.join(f.name for f in fields(WorkloadConf))})")
    skew, routing = wl.get("routing_skew", 0.0), wl.get("routing", "router")
    for key, v in [(k, wl[k]) for k in LOWEST] + [("routing_skew", skew), ("routing", routing)]:
        check_values("workload.", key, [v])  # (the rule a space's choices obey too)
    if not wl.get("timeout_s", 1) > 0:
        raise ValueError(f"workload.timeout_s={wl['timeout_s']!r} must be positive")
    if routing == "uniform" and skew:
        raise ValueError(f"workload.routing=uniform with workload.routing_skew={skew!r}: a skew "
                         "already draws each token's experts (from its Zipf prior); uniform is "
                         "the prior of exponent 0")
    routed = [k for k in ("routing_skew", "routing") if k in space] or \
        [k for k, v in (("routing_skew", skew), ("routing", routing == "uniform")) if v]
    if routed and not sets_experts(space, base):
        raise ValueError(f"workload.{routed[0]} routes a mixture of experts' tokens, and no design "
                         f"of this study has experts (n_experts = {base.n_experts}, none set by "
                         "the space)")

    def most(key):
        sp = space.get(key) or {}
        return max([wl[key], *sp.get("choices", []), sp.get("high", 0)])

    def least_seq():
        sp = space.get("max_seq_len") or {}
        return min([base.max_seq_len, *sp.get("choices", []), sp.get("low", base.max_seq_len)])

    need, have = most("prompt_len") + most("new_tokens"), least_seq()
    if need > have:
        raise ValueError(f"workload.prompt_len + workload.new_tokens = {need} exceeds the design's "
                         f"max_seq_len {have}{whose}")


def check_weights(weights: str | None) -> None:
    """Refuse a ``weights`` path that is not a readable safetensors checkpoint, before the first
    trial (``zoo.checkpoint.check_checkpoint``; nothing when ``weights`` is unset).

    Raises:
        ValueError: naming the path and what is wrong with it.
    """
    if weights:
        from zoo.checkpoint import check_checkpoint

        check_checkpoint(weights)
