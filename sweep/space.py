"""The design space of an experiment and the Optuna sampler that walks it.

A space maps a parameter to ``{choices: [...]}``, ``{divisors_of: field}``, ``{low, high, step,
log}`` or ``{choices: {label: {field: value, ...}}}`` (a bundle). Keys are ``ModelConfig`` fields,
workload fields (``WORKLOAD_KEYS``), the decode ``mode`` (``RUN_KEYS``) or bundle labels.
"""

from __future__ import annotations

import math

import optuna

from zoo import ModelConfig

WORKLOAD_KEYS = ("batch", "prompt_len", "new_tokens", "routing_skew", "routing")
RUN_KEYS = ("mode",)  # sampled like a design field, but how the trial runs (zoo.modes.MODES)
SAMPLERS = ("auto", "grid", "tpe", "nsga2", "random")


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order (``n_kv_heads`` candidates for ``n_heads``)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def divisors_of(base: ModelConfig, key: str, sp: dict) -> list[int]:
    """The divisors of the base design's field ``sp["divisors_of"]`` (space entry ``key``).

    Raises:
        ValueError: the field is not an integer field of the design (named).
    """
    field = sp["divisors_of"]
    value = getattr(base, field, None) if isinstance(field, str) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"experiment.space.{key}.divisors_of={field!r}: not a positive integer "
                         f"field of the design (e.g. n_heads, d_model)")
    return divisors(value)


def check_space(space: dict, base: ModelConfig) -> None:
    """Refuse a space no study could walk, before any work (each entry named): an entry that is
    not a mapping of ``choices`` (a list, not empty, of numbers, strings, booleans or null; or
    labels of field bundles, each a mapping of known fields), ``divisors_of`` or ``low``/``high``
    (numbers, ``low <= high``, a positive ``step``, ``log`` only above 0 and without a step); a
    key that is no design or workload field nor a bundle's label; a ``divisors_of`` naming no
    integer field; a workload field or ``mode`` given a value no trial could run
    (``check_values``). A design field's values are checked design by design (pruned, with the
    reason) as the study walks them.

    Raises:
        ValueError: the first bad entry, named.
    """
    import dataclasses

    fields = {f.name for f in dataclasses.fields(ModelConfig)} | set(WORKLOAD_KEYS + RUN_KEYS)
    for key, sp in space.items():
        if not isinstance(sp, dict) or not ("choices" in sp or sp.get("divisors_of")
                                            or ("low" in sp and "high" in sp)):
            raise ValueError(f"experiment.space.{key}: needs choices, divisors_of, or low/high; "
                             f"got {sp!r}")
        choices = sp.get("choices")
        bundle = isinstance(choices, dict)  # labels of field bundles
        if not bundle and key not in fields:
            raise ValueError(f"experiment.space.{key}: not a design field, workload field "
                             f"({', '.join(WORKLOAD_KEYS)}) or mode, nor a bundle of them")
        if "choices" in sp and not choices:
            raise ValueError(f"experiment.space.{key}.choices is empty")
        if bundle:
            for label, b in choices.items():
                unknown = sorted(set(b) - fields) if isinstance(b, dict) else []
                if not isinstance(b, dict) or not b or unknown:
                    raise ValueError(f"experiment.space.{key}.choices.{label}: a bundle is a "
                                     f"mapping of design or workload fields to values; got {b!r}"
                                     + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
                for k, v in b.items():
                    check_values(f"experiment.space.{key}.choices.{label}.{k}: ", k, [v])
        elif "choices" in sp:
            if not isinstance(choices, list) or not all(
                    v is None or isinstance(v, bool | int | float | str) for v in choices):
                raise ValueError(f"experiment.space.{key}.choices={choices!r} must be a list of "
                                 "values (numbers, strings, booleans or null)")
            check_values(f"experiment.space.{key}.choices: ", key, choices)
        elif sp.get("divisors_of"):
            divisors_of(base, key, sp)
        else:
            _check_range(key, sp)
            check_values(f"experiment.space.{key}: ", key, [sp["low"], sp["high"]])


def _check_range(key: str, sp: dict) -> None:
    """Refuse a ``low``/``high`` entry Optuna could not sample (``suggest_int`` /
    ``suggest_float``'s own rules, said by the entry's name).

    Raises:
        ValueError: the entry named, with what is wrong."""
    low, high, step, log = sp["low"], sp["high"], sp.get("step"), sp.get("log", False)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
               for v in (low, high)):
        raise ValueError(f"experiment.space.{key}: low={low!r} and high={high!r} must be numbers")
    if low > high:
        raise ValueError(f"experiment.space.{key}: low={low} is above high={high}")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int | float)
                             or not step > 0):
        raise ValueError(f"experiment.space.{key}.step={step!r} must be a positive number")
    if not isinstance(log, bool):
        raise ValueError(f"experiment.space.{key}.log={log!r} must be true or false")
    if log and (low <= 0 or step not in (None, 1)):
        raise ValueError(f"experiment.space.{key}: log=true needs low > 0 and no step "
                         f"(low={low}, step={step})")


LOWEST = {"batch": 1, "prompt_len": 1, "new_tokens": 1, "repeats": 1, "warmup": 0}


def check_values(where: str, key: str, values: list) -> None:
    """Refuse a workload field's or the decode mode's values no trial could run (``LOWEST``'s
    fields: integers at least that; ``routing``: router or uniform; ``routing_skew``: a number in
    [0, 8]; ``mode``: one of ``zoo.modes.MODES``); a design field's are left to the design's own
    checks. ``where`` begins the message (``"workload."``, or a space entry and ``": "``): the
    workload's own values (``sweep.plan.check_workload``) and a space's choices obey one rule.

    Raises:
        ValueError: the first such value, after ``where``."""
    from zoo.modes import MODES

    for v in values:
        if key in LOWEST and (isinstance(v, bool) or not isinstance(v, int) or v < LOWEST[key]):
            raise ValueError(f"{where}{key}={v!r} must be an integer >= {LOWEST[key]}")
        if key == "routing" and v not in ("router", "uniform"):
            raise ValueError(f"{where}routing={v!r} must be router or uniform (router: the "
                             "router as built; uniform: each token's experts drawn uniformly)")
        if key == "routing_skew" and (isinstance(v, bool) or not isinstance(v, int | float)
                                      or not 0 <= v <= 8):
            raise ValueError(f"{where}routing_skew={v!r} must be a number in [0, 8] (the Zipf "
                             "exponent over a design's experts; 0: the router as built)")
        if key == "mode" and v not in MODES:
            raise ValueError(f"{where}mode={v!r} is not one of {', '.join(MODES)}")


def sets_experts(space: dict, base: ModelConfig) -> bool:
    """Whether some design of the study has experts: the base (``n_experts > 0``), or a choice
    of the space (``n_experts``, or a bundle setting it)."""
    if base.n_experts > 0:
        return True
    for key, sp in space.items():
        choices = sp.get("choices")
        if isinstance(choices, dict):  # labels of field bundles
            values = [b.get("n_experts") for b in choices.values() if isinstance(b, dict)]
        elif key == "n_experts":
            values = [*(choices or []), sp.get("high")]
        else:
            continue
        if any((v or 0) > 0 for v in values):
            return True
    return False


def grid_of(space: dict, base: ModelConfig) -> dict | None:
    """The space as an Optuna grid ``{param: [values]}``, or None if a parameter is continuous."""
    grid = {}
    for key, sp in space.items():
        if sp.get("divisors_of"):
            grid[key] = divisors_of(base, key, sp)
        elif "choices" in sp:
            grid[key] = list(sp["choices"])
        elif sp.get("step") and isinstance(sp.get("low"), int):
            grid[key] = list(range(sp["low"], sp["high"] + 1, sp["step"]))
        else:
            return None
    return grid


def suggest(trial: optuna.Trial, space: dict, base: ModelConfig) -> tuple[dict, dict]:
    """Sample one design: ``(model_overrides, workload_overrides)``; a sampled ``mode`` (decode
    mode, ``RUN_KEYS``) travels with the workload overrides.

    Raises:
        ValueError: a malformed space entry (the message names it).
    """
    model, workload = {}, {}
    for key, sp in space.items():
        if sp.get("divisors_of"):
            value = trial.suggest_categorical(key, divisors_of(base, key, sp))
        elif "choices" in sp:
            choices = sp["choices"]
            value = trial.suggest_categorical(key, list(choices))
            if isinstance(choices, dict):  # a bundle of fields under a label
                for k, v in choices[value].items():
                    (workload if k in WORKLOAD_KEYS + RUN_KEYS else model)[k] = v
                continue
        elif "low" in sp and "high" in sp:
            if isinstance(sp["low"], int) and isinstance(sp["high"], int):
                value = trial.suggest_int(key, sp["low"], sp["high"], step=sp.get("step", 1),
                                          log=sp.get("log", False))
            else:
                value = trial.suggest_float(key, sp["low"], sp["high"], log=sp.get("log", False))
        else:
            raise ValueError(f"space entry {key!r} needs choices, divisors_of, or low/high: {sp}")
        (workload if key in WORKLOAD_KEYS + RUN_KEYS else model)[key] = value
    return model, workload



def sampler_kind(plan) -> str:
    """The sampler a study uses: ``plan.sampler``, with ``auto`` resolved to ``grid`` for an
    all-discrete space of <= 64 points, else ``tpe``."""
    grid = grid_of(plan.space, plan.base) if plan.space else {}
    if plan.sampler == "auto":
        return "grid" if grid is not None and math.prod(map(len, grid.values())) <= 64 else "tpe"
    return plan.sampler


def study_grid(plan) -> dict:
    """The grid whose designs are queued one by one (``sweep.storage.enqueue_next``) when the
    study's sampler is the grid; empty otherwise (TPE, NSGA-II and random sample themselves)."""
    if not plan.space or sampler_kind(plan) != "grid":
        return {}
    return grid_of(plan.space, plan.base) or {}


def make_sampler(plan) -> optuna.samplers.BaseSampler:
    """The study's sampler (``sampler_kind``; multi-objective TPE for several objectives).

    Raises:
        ValueError: ``grid`` on a space that is not discrete, or an unknown sampler.
    """
    grid = grid_of(plan.space, plan.base) if plan.space else {}
    kind = sampler_kind(plan)
    if kind == "grid":
        if grid is None:
            raise ValueError("sampler=grid needs a discrete space (choices, divisors_of or step)")
        return optuna.samplers.GridSampler(grid or {"_": [0]}, seed=plan.seed)
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=plan.seed)
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=plan.seed)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=plan.seed)
    raise ValueError(f"sampler={kind!r} is not one of {', '.join(SAMPLERS)}")


def _axis(sp: dict, base: ModelConfig, key: str = "") -> list:
    """The values of one space entry: its choices, the divisors, or a continuous range's low,
    middle and high (on its step, in log for ``log``)."""
    if sp.get("divisors_of"):
        return divisors_of(base, key, sp)
    if "choices" in sp:
        return list(sp["choices"])
    lo, hi, step = sp["low"], sp["high"], sp.get("step")
    if sp.get("log"):
        mid = math.sqrt(lo * hi)
    else:
        mid = (lo + hi) / 2
    if isinstance(lo, int) and isinstance(hi, int):
        st = step or 1
        mid = lo + round((mid - lo) / st) * st
        return sorted({lo, int(mid), hi})
    return [lo, mid, hi]


def _thin(values: list, k: int) -> list:
    """``k`` of ``values`` evenly spread, the first and last kept (all of them if fewer)."""
    if len(values) <= k:
        return values
    if k == 1:
        return [values[len(values) // 2]]
    return [values[round(i * (len(values) - 1) / (k - 1))] for i in range(k)]


def study_designs(space: dict, base: ModelConfig, workload: dict, mode: str,
                  most: int = 256, left_out: list[str] | None = None
                  ) -> list[tuple[ModelConfig, dict, str]]:
    """The designs a study may run, as ``(ModelConfig, workload, mode)``, for its calibration
    (``sweep.analysis.needs.needs``): every point of a space of at most ``most``, else a
    lattice of at most ``most`` points (each entry's values thinned evenly, ends kept; a
    continuous range taken at its low, middle and high), never an enumeration of a large space.
    Bundles are expanded, workload and mode keys applied, invalid designs left out (each one's
    reason appended to ``left_out`` if given); just the base design for an empty space."""
    from itertools import product

    from zoo import DesignError

    if not space:
        return [(base, dict(workload), mode)]
    axes = {key: _axis(sp, base, key) for key, sp in space.items()}
    k = max(len(v) for v in axes.values())
    while k > 1 and math.prod(min(len(v), k) for v in axes.values()) > most:
        k -= 1
    axes = {key: _thin(v, k) for key, v in axes.items()}
    out = []
    for point in product(*axes.values()):
        over = {}
        for key, value in zip(axes, point):
            choices = space[key].get("choices")
            over.update(choices[value] if isinstance(choices, dict) else {key: value})
        wl = dict(workload, **{k: v for k, v in over.items() if k in WORKLOAD_KEYS})
        m = over.get("mode", mode)
        try:
            cfg = base.replace(**{k: v for k, v in over.items()
                                  if k not in WORKLOAD_KEYS + RUN_KEYS}).validate()
        except DesignError as e:
            if left_out is not None:
                left_out.append(str(e))
            continue
        out.append((cfg, wl, m))
    return out


def space_designs(space: dict, base: ModelConfig, most: int = 256) -> list[ModelConfig]:
    """The designs of a space over ``base`` (``study_designs``' lattice beyond ``most``; workload
    and mode keys and invalid designs left out); just ``base`` for an empty space."""
    wl = {"batch": 1, "prompt_len": 1, "new_tokens": 1}
    return list({repr(sorted(c.to_dict().items(), key=str)): c
                 for c, _, _ in study_designs(space, base, wl, "eager", most)}.values())


def shipped_items(cpu: bool = False) -> list[tuple[ModelConfig, dict, str]]:
    """The designs of every shipped model preset and experiment (``conf/``) at their workloads,
    what the shipped calibration covers (``python -m sweep.cli.calibrate``): on a GPU the real
    presets at the default workload and each experiment's ``space`` (``study_designs``' lattice)
    over its base model and workload, in CUDA-graph mode; on the CPU the tiny model and the
    ``space_cpu`` spaces at the CPU workload, eagerly."""
    import yaml

    from .common.env import CONF
    from .config.schema import CpuFallbackConf, WorkloadConf

    conf = CONF
    keys = ("batch", "prompt_len", "new_tokens")

    def workload(name):
        if cpu:
            w = CpuFallbackConf().workload
            return {k: getattr(w, k) for k in keys}
        d = dict(vars(WorkloadConf()), **yaml.safe_load((conf / "workload" /
                                                         f"{name}.yaml").read_text()))
        return {k: d[k] for k in keys}

    mode = "eager" if cpu else "cudagraph"
    items = [(ModelConfig.from_name("tiny"), workload("default"), mode)] if cpu else [
        (ModelConfig.from_name(p.stem), workload("default"), mode)
        for p in sorted((conf / "model").glob("*.yaml")) if p.stem != "tiny"]
    for path in sorted((conf / "experiment").glob("*.yaml")):
        exp = yaml.safe_load(path.read_text())
        over = {list(d)[0].split("/")[-1]: list(d.values())[0]
                for d in exp.get("defaults", []) if isinstance(d, dict)}
        base = ModelConfig.from_name("tiny" if cpu else over.get("model", "llama3_2_1b"))
        model_over = exp.get("model") or {}
        if model_over and not cpu:
            base = base.replace(**model_over)
        e = exp.get("experiment", {})
        space = (e.get("space_cpu") if cpu and e.get("space_cpu") is not None
                 else e.get("space", {}))
        if (exp.get("study") or {}).get("sampler") == "random" and not cpu:
            continue  # predict-only spaces (design_space): measured, a study calibrates its own
        items += study_designs(space or {}, base, workload(over.get("workload", "default")),
                               mode, most=64)
    return items


def shipped_designs(cpu: bool = False) -> list[ModelConfig]:
    """The distinct designs of ``shipped_items``."""
    out = {}
    for c, _, _ in shipped_items(cpu):
        out.setdefault(repr(sorted(c.to_dict().items(), key=str)), c)
    return list(out.values())


def distinct_designs(plan, most: int = 4096) -> int | None:
    """How many distinct valid designs (with their workload and mode) a discrete space holds,
    when it has at most ``most`` points; None for a continuous or larger one."""
    grid = grid_of(plan.space, plan.base)
    if grid is None or math.prod(map(len, grid.values())) > most:
        return None
    items = study_designs(plan.space, plan.base, plan.workload, plan.mode, most=most)
    return len({repr((sorted(c.to_dict().items(), key=str), sorted(w.items()), m))
                for c, w, m in items})
