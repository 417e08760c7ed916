"""The objective: one trial's pipeline, from a sampled design to its results row.

sample the design (``sweep.space``) -> validate it (a refused design fails here, before any work)
-> prune it on the experiment's constraints -> measure it in a child process
(``sweep.measure.child``) -> add the analytic and derived figures (``sweep.analysis``) -> run the
profilers the profile asks for (``sweep.measure.profilers``, one call each) -> bottleneck class and
diagnosis -> record the results row as the Optuna trial's user attribute ``row`` (one JSON text).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import time
import traceback

import optuna
from optuna.trial import TrialState

from zoo import DesignError, ModelConfig

from . import measure
from .analysis import derived, diagnosis, pricing
from .analysis import module_shares as modules
from .analysis import predict as perf
from .analysis.memory import check_fits, check_time
from .common import row as R
from .common.env import REPO
from .common.trial_record import TrialRecord, row_json
from .measure import contention, faults
from .measure.child import child_failure, run_child, trial_spec
from .plan import check_mode
from .report.tables import cut_off
from .space import WORKLOAD_KEYS, suggest
from .storage import duplicate_of, finished, requeue


class TrialFailed(Exception):
    """A trial that ended without a measurement; the message is its ``fail_reason``."""


def design_columns(cfg: ModelConfig) -> dict:
    """The design fields of a results row (``rope_scaling`` as JSON text)."""
    d = cfg.to_dict()
    d.pop("extra", None)
    d["rope_scaling"] = json.dumps(d["rope_scaling"]) if d["rope_scaling"] else ""
    d["model"] = d.pop("name")
    return d


class Objective:
    """Callable for ``study.optimize``: one design per call, returns the objective values.

    Args:
        plan: the study's ``sweep.plan.Plan``.
        ceilings: the device's measured ceilings (``sweep.caches.ceiling_cache.measure_ceilings``).
        total: designs the study will run (for the progress line).

    Raises (from a call): ``TrialFailed`` (a FAIL, ``fail_reason``), ``optuna.TrialPruned``.
    """

    def __init__(self, plan, ceilings: dict, total: int, progress=None):
        from .report.progress import StudyProgress

        self.plan, self.ceilings, self.total = plan, ceilings, total
        self.progress = progress or StudyProgress(total, quiet=plan.quiet)
        if plan.predict:  # no device here: the given calibration file, else the target's shipped
            self.calibration, self.calibration_reason = given_calibration(plan.calibration,
                                                                          plan.spec)
        else:
            self.calibration, self.calibration_reason = model_calibration(plan, ceilings,
                                                                          self.progress)

    def __call__(self, trial: optuna.Trial):
        self.k = None  # the design's place, once _run knows it (for the error line below)
        try:  # Ctrl-C and SIGTERM come while a child runs (``Child.wait``; ``common.interrupts``)
            return self._run(trial)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (``run_trials``): the design is queued again
            trial.set_user_attr("interrupted", True)
            trial.set_user_attr("fail_reason", "interrupted: the study was stopped (Ctrl-C or "
                                               "SIGTERM) during the trial; its design is queued again")
            requeue(trial.study, trial.study._storage.get_trial(trial._trial_id))
            raise
        except (TrialFailed, optuna.TrialPruned):
            raise
        except Exception as e:  # the study process's own error (a full disk, a bug): the design
            reason = f"error in the study process: {type(e).__name__}: {e}"  # a FAIL, the study
            trial.set_user_attr("fail_reason", reason[:2000])  # goes on
            trial.set_user_attr("traceback", traceback.format_exc()[-4000:])
            self.progress.line(f"[{self.k or trial.number + 1}/{self.total}] FAIL ({reason[:200]})")
            raise TrialFailed(reason) from e

    def _run(self, trial: optuna.Trial):
        plan = self.plan
        t0 = time.time()
        if not plan.predict:  # a predicted trial has no worker or device
            trial.set_user_attr("worker_host", socket.gethostname())
            trial.set_user_attr("worker_pid", os.getpid())
        if os.environ.get("CUDA_VISIBLE_DEVICES") is not None and not plan.predict:
            trial.set_user_attr("worker_gpu", os.environ["CUDA_VISIBLE_DEVICES"])
        if plan.queue_only and not _from_queue(trial):
            # another worker took the last queued design between our check and ask()
            trial.set_user_attr("spare", True)
            raise optuna.TrialPruned("spare: no queued design left for this worker")
        if plan.queue_only and (other := duplicate_of(trial.study, trial.number)) is not None:
            trial.set_user_attr("spare", True)  # never measure a design twice
            raise optuna.TrialPruned(f"spare: trial {other} holds this design")
        overrides, wl_over = suggest(trial, plan.space, plan.base)
        mode = wl_over.pop("mode", plan.mode)
        wl = dict(plan.workload, **wl_over)
        label = ", ".join(f"{k}={v}" for k, v in trial.params.items()) or "base design"
        self.k = finished(trial.study) + 1  # the design's place in the study, for its line
        if not plan.queue_only and (other := _finished_twin(trial)) is not None:
            # a sampler (NSGA-II, TPE) proposing a design already run: nothing is measured again,
            # the sampler learns its values, and it does not count as a design of the study
            trial.set_user_attr("duplicate_of", other.number)
            if other.state == TrialState.COMPLETE:
                return other.values
            raise optuna.TrialPruned(f"duplicate of trial {other.number}")
        cfg = None
        try:
            cfg = plan.base.replace(**overrides)
            cfg.validate(None if plan.predict else plan.device)
            need = wl["prompt_len"] + wl["new_tokens"]
            if need > cfg.max_seq_len:
                raise DesignError(f"prompt_len + new_tokens = {need} exceeds max_seq_len "
                                  f"{cfg.max_seq_len}")
            if not plan.predict:
                check_mode(mode, plan.device, cfg)
        except DesignError as e:  # with the design's columns where it was built
            row = {**(design_columns(cfg) if cfg else {}), **overrides, **wl_over, "mode": mode}
            return self._fail(trial, f"invalid design: {e}", label, t0,
                              dict(row, experiment=plan.experiment))
        rec = TrialRecord(design={**design_columns(cfg), "experiment": plan.experiment,
                                  "study": plan.name, "mode": mode,
                                  "profile": plan.profile.get("name", "timing")},
                          workload={k: wl[k] for k in WORKLOAD_KEYS})
        if plan.constraints:  # pruned before any GPU work, the reason kept
            from zoo import counts

            analytic = counts.summary(cfg, wl["batch"], wl["prompt_len"], wl["new_tokens"],
                                      wl.get("routing_skew", 0.0))
            broken = counts.violations(plan.constraints, analytic)
            rec.derived.update({k: analytic[k] for k in plan.constraints})
            if broken:
                return self._prune(trial, "pruned: " + "; ".join(broken.values()), label, t0,
                                   rec.columns())
        row = rec.columns()  # before the measurement: the design, its workload, its constraints
        if not plan.predict:  # a design that cannot fit the device or its timeout: pruned first
            try:
                check_fits(cfg, wl, plan.device)
                check_time(cfg, wl, self.ceilings)
            except DesignError as e:
                return self._prune(trial, f"pruned: {e}", label, t0, row)
        if plan.predict:
            row["design"] = json.dumps(overrides)
            return self._predicted(trial, cfg, wl, mode, row, label, t0)
        trial.set_user_attr("design", json.dumps(overrides))
        _store_row(trial, row)  # an interrupted trial's row still says which design it was
        rec.design.update(plan.switches.columns())
        self._top_up(cfg, wl, mode)
        trial_dir = plan.results / "trials" / f"{trial.number:04d}"
        spec = trial_spec(cfg, wl, plan.device["type"], mode, trial_dir, seed=plan.seed,
                          weights=plan.weights, profile=plan.profile, switches=plan.switches,
                          tuning_dir=plan.cache("tuning"),
                          fault=faults.for_trial(plan.fault, trial.number),
                          env={"DESIGNZOO_NVTX": "1"} if plan.profile.get("nvtx") else {})
        self.progress.start(label)
        with contention.measuring(plan.device, self.progress.line) as use:
            res = self._measure(spec, trial_dir, wl, rec, cfg)
        rec.environment.update(use, **(res.get("env") or {}))  # the device's lock; who else used it
        if res.get("status") != "ok":
            return self._fail(trial, child_failure(res), label, t0, rec.columns())
        rec.measured.update(res["measured"])
        rec.derived.update(derived.derived(cfg, wl, res["measured"], plan.spec, self.ceilings))
        rec.predicted.update(perf.row_predictions(
            cfg, wl, plan.spec, self.calibration, mode, self.ceilings, res["measured"],
            self.calibration_reason, plan.switches))
        noisy = derived.noisy_stages(res["measured"])
        rec.status.update(noisy=bool(noisy), noisy_stages=",".join(noisy),
                          remeasured=rec.status.get("remeasured", False))
        if errors := derived.physical_limit_errors(rec.columns()):
            return self._fail(trial, "measurement error: " + "; ".join(errors), label, t0,
                              rec.columns())
        rec.profilers.update(res.get("profiles") or {})
        rec.profilers.update(modules.module_check(rec.columns()))
        rec.derived.update(diagnosis.diagnose(rec.columns()))
        rec.status["trial_dir"] = str(trial_dir.relative_to(REPO)
                                      if trial_dir.is_relative_to(REPO) else trial_dir)
        have = rec.columns()
        for st in ("prefill", "decode"):  # J/token needs NVML (profile=nvml)
            if f"{st}_j_per_token" not in have:
                rec.measured[f"{st}_j_per_token"] = math.nan
                rec.measured[f"{st}_j_per_token_reason"] = "not measured: profile without nvml"
        row = rec.columns()
        _store_row(trial, row)
        flag = (f" NOISY ({row['noisy_stages']}: p90/min > {derived.NOISY_P90_OVER_MIN},"
                " measured twice)" if noisy else "") + (  # the machine busy with other work
            f" CONTENDED ({row.get('contended_evidence')})" if row.get(R.CONTENDED) else "")
        took = {k.removesuffix("_s"): row[k] for k in ("build_s", "compile_s", "measure_s") if k in row}
        other = "other with the noisy first run" if row.get("remeasured") else "other"  # start, store
        took = took and took | {other: max(time.time() - t0 - sum(took.values()), 0.0)}
        phases = ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
        self.progress.line(
            f"[{self.k}/{self.total}] {label}: decode {row[R.RATE['decode']]:.1f} "
            f"tok/s (TPOT {row[R.TIME['decode']]:.2f} ms, MBU "
            f"{row[R.mbu('decode')]:.2f} of measured), TTFT {row[R.TIME['prefill']]:.1f} ms "
            f"({time.time() - t0:.0f} s" + (f": {phases}" if phases else "") + f"){flag}")
        values = self._values(trial, row, label, t0, "measured")
        self.progress.done(f"{label} {row[R.RATE['decode']]:.0f} tok/s")
        return values

    def _measure(self, spec: dict, trial_dir, wl: dict, rec: TrialRecord, cfg) -> dict:
        """The trial child's result (measured once more when noisy) and, when it measured, the
        profilers' runs (``res["profiles"]``): everything that uses the device, in one block."""
        res = run_child(spec, trial_dir, wl.get("timeout_s", 900.0), on_line=self.progress.on_line)
        if res.get("status") == "ok" and derived.noisy_stages(res["measured"]):
            rec.status["remeasured"] = True  # measured once more before it is accepted
            res = run_child(spec, trial_dir, wl.get("timeout_s", 900.0),
                            on_line=self.progress.on_line)
        if res.get("status") == "ok" and not derived.physical_limit_errors(
                {**rec.columns(), **res["measured"]}):
            profiles: dict = {}
            for profiler in measure.profilers(self.plan.profile):
                profiles.update(profiler.profile_trial(spec, trial_dir, cfg, wl, self.ceilings))
            res["profiles"] = profiles
        return res

    def _top_up(self, cfg, wl, mode) -> None:
        """Before measuring a design of a large space (its calibration covered a lattice):
        measure the calibration entries this design needs and the cache lacks, so its
        prediction rests on its own shapes (``sweep.caches.calibration.ensure``; nothing when
        they are there, or with ``calibration_policy=frozen`` or a given calibration file)."""
        from .analysis.needs import missing, needs
        from .caches import calibration as cal

        plan = self.plan
        if (self.calibration is None or plan.calibration or plan.calibration_policy != "auto"
                or plan.predict):
            return
        item = [(cfg, wl, mode)]
        if not any(missing(self.calibration.t, needs(item, plan.device["type"])).values()):
            return
        try:
            self.calibration = pricing.Calibrated(cal.ensure(
                plan.device, item, plan.switches, self.ceilings, cal_dir=plan.cache("calibration"),
                tuning_dir=plan.cache("tuning"), on_line=self.progress.on_line,
                log=self.progress.line))
        except (RuntimeError, OSError) as e:
            self.progress.line(f"calibration of this design's shapes failed ({e}); its prediction "
                               "rests on the nearest calibrated shapes")

    def _values(self, trial, row, label, t0, verb):
        """The trial's objective values from ``row``; a FAIL naming the objectives that are not
        finite (``verb``: measured / predicted)."""
        values = [row.get(o, math.nan) for o in self.plan.objectives]
        bad = [o for o, v in zip(self.plan.objectives, values) if not math.isfinite(v)]
        if bad:
            return self._fail(trial, f"objective(s) not {verb}: {', '.join(bad)}", label, t0, row)
        return values

    def _predicted(self, trial, cfg, wl, mode, row, label, t0):
        """A predict-only trial: ``targets.predict_on``'s and the analytic figures; PRUNED unfit."""
        from zoo import counts

        from .analysis.targets import misfit, predict_on

        plan = self.plan
        analytic = counts.summary(cfg, wl["batch"], wl["prompt_len"], wl["new_tokens"],
                                  wl.get("routing_skew", 0.0))
        try:
            p = predict_on(cfg, wl, plan.spec, self.calibration, mode, analytic, plan.switches)
        except (KeyError, ValueError) as e:
            return self._fail(trial, f"cannot predict: {e}", label, t0, row)
        row.update(analytic)
        row.update(plan.switches.columns())
        row.update(p, predicted=True, peak_mem_bytes=p["memory_needed_bytes"],
                   peak_mem_bytes_basis="predicted: weights + KV cache + prefill activations")
        if self.calibration_reason and row.get("basis_kind") == "roofline":  # (not: a fitted one)
            row["prediction_reason"] = self.calibration_reason
        if why := misfit(p, plan.spec):  # as a measured space prunes a design that cannot fit it
            return self._prune(trial, why, label, t0, row)
        _store_row(trial, row)
        if trial.number < 10 or trial.number % 500 == 0:  # the rest: the bar, then the tables
            more = " (one line in 500 from here on)" if trial.number == 9 < self.total - 1 else ""
            self.progress.line(f"[{self.k}/{self.total}] {label}: predicted decode "
                               f"{row[R.RATE['decode']]:.1f} tok/s, TTFT {row[R.TIME['prefill']]:.1f} ms on "
                               f"{plan.spec.name} ({row['basis_kind']}){more}")
        values = self._values(trial, row, label, t0, "predicted")
        self.progress.done(f"{row[R.RATE['decode']]:.0f} tok/s predicted")
        return values

    def _prune(self, trial, reason, label, t0, row):
        self._end(trial, reason, label, t0, row, reason, optuna.TrialPruned)

    def _fail(self, trial, reason, label, t0, row):
        self._end(trial, reason, label, t0, row, f"FAIL ({reason[:200]})", TrialFailed)

    def _end(self, trial, reason, label, t0, row, shown, exc):
        """Record ``row`` and ``fail_reason`` on the trial, print ``shown``, raise ``exc``."""
        if self.plan.predict:  # one storage write (``_predicted``)
            _store_row(trial, {**row, "fail_reason": reason})
        else:  # the reason apart: ``report.tables.cut_off`` and resume read it from the trial
            _store_row(trial, row)
            trial.set_user_attr("fail_reason", reason)
        if not self.plan.predict or trial.number < 10:
            self.progress.line(f"[{self.k or trial.number + 1}/{self.total}] {label}: "
                               f"{shown} "
                               f"({time.time() - t0:.0f} s)")
        self.progress.done(f"{label}: {'pruned' if exc is optuna.TrialPruned else 'FAIL'}")
        raise exc(reason)


def given_calibration(path: str | None, spec=None):
    """``(Calibrated or None, reason)`` for a predict-only study: the calibration file given
    (``calibration=FILE.json``), else the one shipped with the package for the target
    ``spec``'s GPU (``sweep.analysis.calibrations``), as it is: ``sweep.analysis.targets``
    decides how it applies to the target. None without either (roofline x stated
    efficiencies)."""
    from .analysis import calibration_store as store

    if path:
        try:
            return pricing.Calibrated(store.load_file(path)), ""
        except (OSError, ValueError) as e:
            return None, str(e)
    have = store.shipped_for(spec) if spec is not None else None
    if have is None:
        return None, ("no calibration given (calibration=FILE.json) nor shipped for this target: "
                      "roofline x stated efficiencies")
    return pricing.Calibrated(have), ""


def model_calibration(plan, ceilings: dict, progress=None):
    """``(Calibrated or None, reason)``: the performance model's calibration for the study's
    device covering the study's designs (``sweep.caches.calibration.ensure``: the cache, started
    from the shipped one of this device, with what it lacks measured now; a large space's designs
    by a bounded lattice, ``sweep.space.study_designs``), or ``plan.calibration`` (a file: as it is
    when it is this device's, else transferred, to a GPU by a sample of its entries timed here
    (``sweep.caches.transfer``), else by the measured ceilings, with the fixed costs measured
    on this host, ``sweep.caches.calibration.host_costs``). Never raises: without
    one, rows carry roofline predictions and the reason."""
    from .analysis import calibration_store as store
    from .caches import calibration as cal
    from .caches.transfer import transfer_here
    from .report.progress import TaskProgress
    from .space import study_designs

    try:
        if plan.calibration:
            given = store.load_file(plan.calibration)
            if given.device == plan.device["name"]:  # this device's own: used as it is
                return pricing.Calibrated(given), ""
            # another device's: its GPU entries transferred, the fixed costs this host's
            given = cal.host_costs(plan.device, given, plan.switches, plan.cache("tuning"))
            return transfer_here(plan.device, given, ceilings, plan.base.dtype,
                                         plan.switches, plan.cache("tuning"))[0], ""
        items = study_designs(plan.space, plan.base, plan.workload, plan.mode)
        log = (lambda m: None) if plan.quiet else (progress.line if progress else print)
        with TaskProgress("calibration", quiet=plan.quiet) as bar:
            got = cal.ensure(plan.device, items, plan.switches, ceilings,
                             cal_dir=plan.cache("calibration"), tuning_dir=plan.cache("tuning"),
                             policy=plan.calibration_policy, on_line=bar.on_line, log=log)
        return pricing.Calibrated(got), ""
    except (RuntimeError, OSError, KeyError, ValueError, subprocess.TimeoutExpired) as e:
        return None, f"no calibration: {e}"[:500]


def _finished_twin(trial: optuna.Trial):
    """A finished trial (COMPLETE, PRUNED or FAIL, not interrupted, not itself a duplicate) with
    the same sampled parameters as ``trial``, or None."""
    mine = trial.params
    if not mine:
        return None
    gone = cut_off(trial.study.get_trials(deepcopy=False))
    for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                            TrialState.PRUNED, TrialState.FAIL)):
        if (t.number != trial.number and t.params == mine and t.number not in gone
                and t.user_attrs.get("duplicate_of") is None
                and not t.user_attrs.get("spare")):
            return t
    return None


def _from_queue(trial: optuna.Trial) -> bool:
    """Whether ``trial`` was popped from the queue (``enqueue_trial``): Optuna keeps the queued
    parameters in the trial's ``fixed_params`` system attribute."""
    for t in trial.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number == trial.number:
            return "fixed_params" in t.system_attrs
    return False


def _store_row(trial: optuna.Trial, row: dict) -> None:
    """Store a trial's row as one user attribute ``row`` (``common.trial_record.row_json``, unpacked
    by ``report.tables``): one storage write, not ~200 (0.7 s of SQLite commits a trial)."""
    trial.set_user_attr("row", row_json(row))
