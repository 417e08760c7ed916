"""The Optuna study: design space -> trials measured in child processes -> one results row each.

One trial: sample a design from the experiment's space (``trial.suggest_*``), validate it (a refused
design fails here, before any GPU work), run ``python -m sweep.trial`` in a child process with a
timeout, add the analytic and derived figures (``sweep.analysis``) and record everything as the
trial's user attributes (so ``optuna-dashboard`` shows them) and as a row of
``results/<study>/trials.parquet``. A failed trial (invalid design, OOM, CUDA error, crash, timeout,
NaN logits) is recorded as FAIL with ``fail_reason`` and the study goes on. Re-running the same
command resumes the study (``load_if_exists``); trials left RUNNING by a killed run are marked FAIL
(``interrupted``) and their designs queued again.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from zoo import DesignError, ModelConfig

from . import analysis, report
from .env import REPO, detect_device, environment, slug
from .hardware import HardwareSpec, load_spec, measure_ceilings
from .trial import DECODE_WINDOW, write_json

WORKLOAD_KEYS = ("batch", "prompt_len", "new_tokens")
RUN_KEYS = ("mode",)  # sampled like a design field, but how the trial runs (zoo.generate.MODES)
SAMPLERS = ("auto", "grid", "tpe", "nsga2", "random")
ROW_OBJECTIVES = {
    "decode_tok_s", "prefill_tok_s", "ttft_ms", "decode_tpot_ms", "prefill_mfu_vs_measured",
    "prefill_mfu_vs_datasheet", "decode_mbu_vs_measured", "decode_mbu_vs_datasheet",
    "peak_mem_bytes", "kv_bytes_per_token", "params_non_embedding", "params_total",
    "decode_j_per_token", "prefill_j_per_token",
}


class TrialFailed(Exception):
    """A trial that ended without a measurement; the message is its ``fail_reason``."""


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


# ---- the design space ---------------------------------------------------------------------

def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order (``n_kv_heads`` candidates for ``n_heads``)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def grid_of(space: dict, base: ModelConfig) -> dict | None:
    """The space as an Optuna grid ``{param: [values]}``, or None if a parameter is continuous."""
    grid = {}
    for key, sp in space.items():
        if sp.get("divisors_of"):
            grid[key] = divisors(getattr(base, sp["divisors_of"]))
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
            value = trial.suggest_categorical(key, divisors(getattr(base, sp["divisors_of"])))
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


def make_sampler(plan: Plan) -> optuna.samplers.BaseSampler:
    """The study's sampler; ``auto`` picks the grid for an all-discrete space of <= 64 points,
    else TPE (multi-objective TPE for several objectives)."""
    grid = grid_of(plan.space, plan.base) if plan.space else {}
    kind = plan.sampler
    if kind == "auto":
        kind = "grid" if grid is not None and math.prod(map(len, grid.values())) <= 64 else "tpe"
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


# ---- one trial ----------------------------------------------------------------------------

def _child_env() -> dict:
    """This process's environment with the repository first on ``PYTHONPATH``, for the
    ``sweep.trial`` and ``sweep.worker`` children (the project need not be installed)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def run_child(spec: dict, trial_dir: Path, timeout_s: float, wrapper: list[str] | None = None
              ) -> dict:
    """Run ``python -m sweep.trial`` on ``spec`` in a child process (optionally under
    ``wrapper``, e.g. an ``ncu`` argument list) and return its result dict.

    The child runs in its own process group, killed whole on timeout. Never raises for a child
    failure: the returned dict has ``status: error`` and a reason instead.
    """
    trial_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = trial_dir / "spec.json", trial_dir / "result.json"
    write_json(spec_path, spec)
    result_path.unlink(missing_ok=True)
    cmd = (wrapper or []) + [sys.executable, "-m", "sweep.trial", str(spec_path), str(result_path)]
    env = _child_env()
    env.update(spec.get("env", {}))
    with open(trial_dir / "log.txt", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"status": "error", "error_type": "timeout",
                    "error": f"trial exceeded {timeout_s:.0f} s and was killed"}
    if result_path.exists():
        res = json.loads(result_path.read_text())
        if res.get("status") == "ok" and rc != 0 and not wrapper:
            res = {"status": "error", "error_type": "exit", "error": f"child exited with {rc}"}
        return res
    tail = (trial_dir / "log.txt").read_text()[-600:].strip()
    if rc < 0:
        why = f"child killed by signal {signal.Signals(-rc).name}"
    else:
        why = f"child exited with code {rc} and wrote no result"
    return {"status": "error", "error_type": "crash", "error": f"{why}; log tail: {tail}"}


def design_columns(cfg: ModelConfig) -> dict:
    """The design fields of a results row (``rope_scaling`` as JSON text)."""
    d = cfg.to_dict()
    d.pop("extra", None)
    d["rope_scaling"] = json.dumps(d["rope_scaling"]) if d["rope_scaling"] else ""
    d["model"] = d.pop("name")
    return d


class Objective:
    """Callable for ``study.optimize``: one design per call, returns the objective values."""

    def __init__(self, plan: Plan, ceilings: dict, total: int):
        self.plan, self.ceilings, self.total = plan, ceilings, total

    def __call__(self, trial: optuna.Trial):
        plan = self.plan
        t0 = time.time()
        trial.set_user_attr("worker_host", socket.gethostname())
        trial.set_user_attr("worker_pid", os.getpid())
        if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
            trial.set_user_attr("worker_gpu", os.environ["CUDA_VISIBLE_DEVICES"])
        if plan.queue_only and not _from_queue(trial):
            # another worker took the last queued design between our check and ask()
            trial.set_user_attr("spare", True)
            raise optuna.TrialPruned("spare: no queued design left for this worker")
        overrides, wl_over = suggest(trial, plan.space, plan.base)
        mode = wl_over.pop("mode", plan.mode)
        wl = dict(plan.workload, **wl_over)
        label = ", ".join(f"{k}={v}" for k, v in trial.params.items()) or "base design"
        try:
            cfg = plan.base.replace(**overrides)
            cfg.validate(plan.device)
            need = wl["prompt_len"] + wl["new_tokens"]
            if need > cfg.max_seq_len:
                raise DesignError(f"prompt_len + new_tokens = {need} exceeds max_seq_len "
                                  f"{cfg.max_seq_len}")
            check_mode(mode, plan.device)
        except DesignError as e:
            return self._fail(trial, f"invalid design: {e}", label, t0,
                              {**overrides, **wl_over, "mode": mode,
                               "experiment": plan.experiment})
        row = {**design_columns(cfg), **{k: wl[k] for k in WORKLOAD_KEYS},
               "experiment": plan.experiment, "study": plan.name, "mode": mode,
               "profile": plan.profile.get("name", "timing")}
        if plan.constraints:  # pruned before any GPU work, the reason kept
            from zoo import counts

            analytic = counts.summary(cfg, wl["batch"], wl["prompt_len"], wl["new_tokens"])
            broken = violations(plan.constraints, analytic)
            row.update({k: analytic[k] for k in plan.constraints})
            if broken:
                return self._prune(trial, "pruned: " + "; ".join(broken), label, t0, row)
        trial.set_user_attr("design", json.dumps(overrides))
        spec = {"model": cfg.to_dict(), "workload": wl, "device": plan.device["type"],
                "mode": mode, "seed": plan.seed, "weights": plan.weights,
                "fault": _fault_for(plan.fault, trial.number), "profile": plan.profile}
        trial_dir = plan.results / "trials" / f"{trial.number:04d}"
        spec["trial_dir"] = str(trial_dir)
        spec["env"] = {"DESIGNZOO_NVTX": "1"} if plan.profile.get("nvtx") else {}
        res = run_child(spec, trial_dir, wl.get("timeout_s", 900.0))
        row.update({k: v for k, v in (res.get("env") or {}).items()})
        if res.get("status") != "ok":
            reason = f"{res.get('error_type', 'error')}: {res.get('error', '')}"
            return self._fail(trial, reason, label, t0, row)
        row.update(res["measured"])
        row.update(analysis.derived(cfg, wl, res["measured"], plan.spec, self.ceilings))
        if plan.profile.get("torch") or plan.profile.get("cublaslt_log"):
            row.update(self._torch(spec, wl, trial_dir))
        if plan.profile.get("ncu"):
            row.update(self._ncu(spec, cfg, wl, trial_dir, row))
        if plan.profile.get("nsys"):
            row.update(self._nsys(spec, wl, trial_dir))
        row.update(analysis.diagnose(row))
        row["trial_dir"] = str(trial_dir.relative_to(REPO) if trial_dir.is_relative_to(REPO)
                               else trial_dir)
        for st in ("prefill", "decode"):  # J/token needs NVML (profile=nvml)
            if f"{st}_j_per_token" not in row:
                row[f"{st}_j_per_token"] = math.nan
                row[f"{st}_j_per_token_reason"] = "not measured: profile without nvml"
        for k, v in row.items():
            trial.set_user_attr(k, _attr(v))
        values = [row.get(o, math.nan) for o in plan.objectives]
        if not plan.quiet:
            print(f"[{trial.number + 1}/{self.total}] {label}: decode {row['decode_tok_s']:.1f} "
                  f"tok/s (TPOT {row['decode_tpot_ms']:.2f} ms, MBU "
                  f"{row['decode_mbu_vs_measured']:.2f} of measured), TTFT {row['ttft_ms']:.1f} ms "
                  f"({time.time() - t0:.0f} s)", flush=True)
        if any(not math.isfinite(v) for v in values):
            bad = [o for o, v in zip(plan.objectives, values) if not math.isfinite(v)]
            return self._fail(trial, f"objective(s) not measured: {', '.join(bad)}", label, t0,
                              row)
        return values

    def _ncu(self, spec, cfg, wl, trial_dir, row) -> dict:
        """Per-stage Nsight Compute figures (``sweep.measure.ncu``), or ``{stage}_ncu_reason``.

        Per stage two child runs under ``ncu``, launched eagerly (the same kernels as a graph
        replay; hooks mark the sample): the ``memory`` set over the whole window (DRAM bytes and
        time of every kernel) and the ``detail`` set over ``ncu_detail_layers`` and the LM head.
        Adds ``{stage}_dram_bytes_over_min`` (measured / analytic minimum bytes),
        ``_arith_intensity_measured`` (analytic matmul FLOPs / measured bytes, FLOP/byte),
        ``_dram_bw_pct_of_measured`` (DRAM bytes / summed kernel time vs the measured copy
        ceiling) and ``_tensor_flops_over_analytic`` (bf16 tensor FLOPs measured on the sample
        / analytic matmul FLOPs of the same layers and LM head).
        """
        from zoo import counts

        from .measure import ncu

        opts = spec["profile"].get("options", {})
        a, b = opts.get("ncu_decode_steps", DECODE_WINDOW)
        layers = list(opts.get("ncu_detail_layers", [0]))
        out = {}
        for stage in ("prefill", "decode"):
            why = ncu.available()
            if why is None:
                try:
                    runs = {}
                    for mset, extra in (("memory", {}), ("detail", {"ncu_sample": layers})):
                        d = trial_dir / f"ncu_{stage}_{mset}"
                        d.mkdir(parents=True, exist_ok=True)
                        res = run_child(dict(spec, profile_window=stage, mode="eager", **extra), d,
                                        wl.get("timeout_s", 900.0),
                                        wrapper=ncu.command(d / "ncu.csv", mset))
                        if res.get("status") != "ok":
                            raise ValueError(f"{mset} run: {res.get('error_type')}: "
                                             f"{res.get('error')}")
                        rows = ncu.parse_csv((d / "ncu.csv").read_text())
                        if not rows:
                            raise ValueError(f"{mset} run: ncu profiled no kernels in the window")
                        runs[mset] = (rows, res["measured"]["profiled_steps"])
                    rows, steps = runs["memory"]
                    out.update(ncu.stage_summary(rows, stage, steps, detail=runs["detail"][0]))
                    out[f"{stage}_ncu_detail_scope"] = (
                        f"layers {layers} of {cfg.n_layers} + lm_head"
                        + (f", decode step {a}" if stage == "decode" else ""))
                except (ValueError, OSError, KeyError) as e:
                    why = f"ncu failed: {e}"[:600]
            if why is not None:
                out[f"{stage}_ncu_reason"] = why
                continue
            if stage == "prefill":
                st = counts.prefill(cfg, wl["batch"], wl["prompt_len"])
            else:  # the profiled steps' mean cache length
                st = counts.decode_step(cfg, wl["batch"], wl["prompt_len"] + (a + b - 1) // 2)
            meas = out[f"{stage}_dram_bytes"]
            out[f"{stage}_dram_bytes_over_min"] = meas / st.min_bytes
            out[f"{stage}_arith_intensity_measured"] = st.matmul_flops / meas if meas else math.nan
            out[f"{stage}_ncu_min_bytes"] = st.min_bytes
            peak = self.ceilings.get("copy_bytes_s", math.nan)
            t = out[f"{stage}_ncu_time_ms"] / 1e3
            out[f"{stage}_dram_bw_pct_of_measured"] = 100 * meas / t / peak if t else math.nan
            per_layer = sum(v for k, v in st.flops.items() if k != "lm_head") / cfg.n_layers
            sample_flops = len(layers) * per_layer + st.flops.get("lm_head", 0)
            out[f"{stage}_tensor_flops_over_analytic"] = (
                out[f"{stage}_tensor_flops_bf16"] / sample_flops if cfg.dtype == "bf16"
                else math.nan)
        return out

    def _torch(self, spec, wl, trial_dir) -> dict:
        """``profile.torch`` (``sweep.trial.torch_windows``) and ``profile.cublaslt_log``
        (``sweep.measure.cublaslt``) in one more child run; ``torch_profile_reason`` on failure."""
        from .measure import cublaslt

        d = trial_dir / "torch"
        d.mkdir(parents=True, exist_ok=True)
        child = dict(spec, profile_window="torch", trial_dir=str(d), env=dict(spec["env"]))
        log = (d / "cublaslt.log").resolve()
        log.unlink(missing_ok=True)
        if spec["profile"].get("cublaslt_log"):
            child["env"].update(cublaslt.env(log))
        res = run_child(child, d, wl.get("timeout_s", 900.0))
        if res.get("status") != "ok":
            return {"torch_profile_reason": f"{res.get('error_type')}: {res.get('error')}"[:600]}
        out = dict(res["measured"]) if spec["profile"].get("torch") else {}
        if spec["profile"].get("cublaslt_log"):
            try:
                out.update(cublaslt.summarize(d))
            except ValueError as e:
                out.update(gemm_shapes=math.nan, gemm_shapes_reason=str(e)[:300])
        return out

    def _nsys(self, spec, wl, trial_dir) -> dict:
        """Per-stage Nsight Systems figures (``sweep.measure.nsys``): one child run per stage
        window under ``nsys profile``, its SQLite export analysed; ``{stage}_nsys_reason`` on
        failure."""
        from .measure import nsys

        out = {}
        for stage in ("prefill", "decode"):
            d = trial_dir / f"nsys_{stage}"
            d.mkdir(parents=True, exist_ok=True)
            res = run_child(dict(spec, profile_window=stage, mode="eager"), d,
                            wl.get("timeout_s", 900.0), wrapper=nsys.command(d / "report"))
            try:
                if res.get("status") != "ok":
                    raise ValueError(f"{res.get('error_type')}: {res.get('error')}")
                out.update(nsys.analyse(d / "report.sqlite", stage,
                                        res["measured"]["profiled_steps"]))
            except (ValueError, OSError, KeyError) as e:
                out.update(nsys.nan_row(stage, f"nsys failed: {e}"[:600]))
        return out

    def _prune(self, trial, reason, label, t0, row):
        self._end(trial, reason, label, t0, row, reason, optuna.TrialPruned)

    def _fail(self, trial, reason, label, t0, row):
        self._end(trial, reason, label, t0, row, f"FAIL ({reason[:200]})", TrialFailed)

    def _end(self, trial, reason, label, t0, row, shown, exc):
        """Record ``row`` and ``fail_reason`` on the trial, print ``shown``, raise ``exc``."""
        for k, v in row.items():
            trial.set_user_attr(k, _attr(v))
        trial.set_user_attr("fail_reason", reason)
        if not self.plan.quiet:
            print(f"[{trial.number + 1}/{self.total}] {label}: {shown} "
                  f"({time.time() - t0:.0f} s)", flush=True)
        raise exc(reason)


def _from_queue(trial: optuna.Trial) -> bool:
    """Whether ``trial`` was popped from the queue (``enqueue_trial``): Optuna keeps the queued
    parameters in the trial's ``fixed_params`` system attribute."""
    for t in trial.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number == trial.number:
            return "fixed_params" in t.system_attrs
    return False


def check_mode(mode: str, device: dict) -> None:
    """Refuse a decode ``mode`` this device cannot run (before any GPU work).

    Raises:
        DesignError: unknown mode, or ``cudagraph``/``compile`` without a CUDA device.
    """
    from zoo.generate import MODES

    if mode not in MODES:
        raise DesignError(f"mode={mode!r} is not one of {', '.join(MODES)}")
    if mode != "eager" and device["type"] != "cuda":
        raise DesignError(f"mode={mode} needs a CUDA GPU (this run is on {device['type']})")


def violations(constraints: dict, analytic: dict) -> list[str]:
    """Constraint bands broken by a design: ``constraints`` maps an analytic figure
    (``zoo.counts.summary`` names, e.g. ``params_non_embedding``) to ``{low, high}`` (either may
    be absent). Returns one text per broken band, naming the figure, its value and the band."""
    out = []
    for key, band in constraints.items():
        v = analytic[key]
        lo, hi = band.get("low"), band.get("high")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            out.append(f"{key} = {v:.4g} outside [{lo if lo is not None else '-inf'}, "
                       f"{hi if hi is not None else 'inf'}]")
    return out


def _fault_for(fault: str | None, number: int) -> str | None:
    """``fault`` is a comma-separated list of ``where:kind`` (every trial) or ``where:kind@N``
    (trial N only); returns the one that applies to trial ``number``, if any."""
    for item in (fault or "").split(","):
        f, _, only = item.strip().partition("@")
        if f and (not only or int(only) == number):
            return f
    return None


def _attr(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else str(v)
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return v


# ---- the study ----------------------------------------------------------------------------

def get_storage(url: str):
    """The Optuna storage for ``url``: a path ending in ``.journal`` or ``journal:PATH`` is a
    ``JournalStorage`` on a ``JournalFileBackend`` (many processes on one host); anything else
    goes to ``optuna.storages.get_storage`` (``sqlite:///...``, ``postgresql://...``).

    Raises:
        RuntimeError: the storage cannot be opened (the message names the URL and the cause).
    """
    try:
        if url.startswith("journal:") or url.endswith(".journal"):
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            path = Path(url.removeprefix("journal:"))
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        return optuna.storages.get_storage(url)
    except Exception as e:  # noqa: BLE001 - any driver error: name the URL
        raise RuntimeError(f"cannot open study storage {url!r}: {type(e).__name__}: {e}") from e


def open_study(plan: Plan) -> optuna.Study:
    """Create or load the study (``load_if_exists``) with the plan's sampler and directions.

    Raises:
        RuntimeError: the storage URL cannot be opened (the message names it).
    """
    storage = get_storage(plan.storage)
    study = optuna.create_study(study_name=plan.name, storage=storage, load_if_exists=True,
                                directions=plan.directions, sampler=make_sampler(plan))
    if list(study.directions) != [optuna.study.StudyDirection[d.upper()]
                                  for d in plan.directions]:
        raise RuntimeError(f"study {plan.name!r} exists with other directions")
    study.set_user_attr("objectives", plan.objectives)
    study.set_user_attr("experiment", plan.experiment)
    study.set_user_attr("workload", plan.workload)
    study.set_user_attr("device", plan.device["name"])
    return study


def recover_interrupted(study: optuna.Study) -> int:
    """Mark RUNNING trials whose worker process on this host is gone as FAIL (``interrupted``)
    and queue their designs again. Returns how many were recovered."""
    host = socket.gethostname()
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get("worker_host") != host or _alive(t.user_attrs.get("worker_pid")):
            continue
        study._storage.set_trial_user_attr(t._trial_id, "fail_reason",
                                           "interrupted: the study process died during the trial")
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study.tell(t.number, state=TrialState.FAIL)
        if t.params:
            study.enqueue_trial(t.params, skip_if_exists=False)
        n += 1
    return n


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def finished(study: optuna.Study) -> int:
    """Designs finished (COMPLETE, FAIL, PRUNED), not counting trials cut off by a killed run
    nor a worker's spare trial (see ``Objective``)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished()
               and not t.user_attrs.get("interrupted") and not t.user_attrs.get("spare"))


def run(plan: Plan):
    """Run (or resume) the study to ``plan.n_trials`` finished designs; write the results.

    With ``plan.workers`` > 1 the designs are measured by that many worker processes
    (``run_workers``); otherwise one at a time in this process.

    Returns:
        ``(study, trials DataFrame)``.
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # we print each trial ourselves
    plan.results.mkdir(parents=True, exist_ok=True)
    study = open_study(plan)
    recovered = recover_interrupted(study)
    grid = grid_of(plan.space, plan.base) if plan.space else {}
    grid_size = math.prod(map(len, grid.values())) if grid is not None else None
    target = plan.n_trials or grid_size or 20
    todo = max(0, target - finished(study))
    if not plan.quiet:
        print(f"study {plan.name} ({plan.storage}): {finished(study)} designs done, "
              f"{todo} to run" + (f", {recovered} interrupted trial(s) queued again"
                                  if recovered else "")
              + (f", {plan.workers} workers" if plan.workers > 1 else ""), flush=True)
    t0 = time.time()
    if plan.workers > 1:
        ceilings = run_workers(plan, study, grid, target)
    else:
        ceilings = measure_ceilings(plan.device)
        objective = Objective(plan, ceilings, target)
        for _ in range(todo):  # one at a time, so a grid that is exhausted stops the loop
            before = finished(study)
            study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=True)
            report.write_table(report.trials_frame(study), plan.results)
            done = finished(study)
            if done == before or (grid_size and done >= grid_size and not _queued(study)):
                break
    df = report.trials_frame(study)
    report.write_table(df, plan.results)
    write_json(plan.results / "study.json", {
        "study": plan.name, "storage": plan.storage, "experiment": plan.experiment,
        "objectives": plan.objectives, "directions": plan.directions, "workload": plan.workload,
        "base_model": plan.base.to_dict(), "space": plan.space, "constraints": plan.constraints,
        "mode": plan.mode, "workers": plan.workers, "run_wall_s": time.time() - t0,
        "hardware_spec": plan.spec.__dict__, "ceilings": ceilings,
        "env": environment(plan.device)})
    report.pareto_plot(df, plan.objectives, plan.directions, plan.results, title=plan.name)
    report.roofline_plot(df, plan.results, title=plan.name)
    from .html_report import write_report

    write_report(plan.results)
    return study, df


def run_workers(plan: Plan, study: optuna.Study, grid: dict | None, target: int) -> dict:
    """Measure the study's designs with ``plan.workers`` processes (``python -m sweep.worker``)
    on the shared storage, each pinned to one GPU of ``plan.gpus`` through
    ``CUDA_VISIBLE_DEVICES`` (on a CPU run they share the CPU). On a grid every design not yet
    finished or queued is enqueued once, and workers take queued designs only, so none runs
    twice; otherwise workers stop once finished plus running trials reach ``target``. Worker
    logs: ``<results>/worker<i>.log``, echoed here as they grow. Returns the ceilings of the
    device (measured once, shared through the cache)."""
    import pickle
    from dataclasses import replace
    from itertools import product

    queue_only = bool(grid)
    if queue_only:
        have = {json.dumps(t.params, sort_keys=True) for t in study.get_trials(deepcopy=False)
                if t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE,
                               TrialState.PRUNED)
                or (t.state == TrialState.FAIL and not t.user_attrs.get("interrupted"))}
        for point in product(*grid.values()):
            params = dict(zip(grid, point))
            if json.dumps(params, sort_keys=True) not in have:
                study.enqueue_trial(params)
    ceilings = measure_ceilings(plan.device)  # once, before the workers read the cache
    wplan = replace(plan, queue_only=queue_only)
    pkl = plan.results / "worker_plan.pkl"
    tmp = pkl.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(wplan))
    os.replace(tmp, pkl)
    procs, logs = [], []
    for i in range(plan.workers):
        env = _child_env()
        if plan.device["type"] == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = str(plan.gpus[i])
        log = plan.results / f"worker{i}.log"
        fh = open(log, "w")  # closed after the worker exits
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "sweep.worker", str(pkl), str(i), str(target)],
            cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT), fh))
        logs.append([log, 0])
    while True:
        alive = [p.poll() is None for p, _ in procs]
        for i, entry in enumerate(logs):
            text = entry[0].read_text(errors="replace")
            new, entry[1] = text[entry[1]:], len(text)
            for line in new.splitlines():
                if not plan.quiet and line.strip():
                    print(f"[worker {i}] {line}", flush=True)
        if not any(alive):
            break
        time.sleep(0.5)
    for i, (p, fh) in enumerate(procs):
        fh.close()
        if p.returncode != 0:
            print(f"worker {i} exited with code {p.returncode}; see {logs[i][0]}", flush=True)
    return ceilings


def _queued(study: optuna.Study) -> bool:
    return any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))


# ---- from the Hydra config ----------------------------------------------------------------

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
