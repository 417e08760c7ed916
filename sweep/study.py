"""The study loop: run (or resume) an Optuna study to its target and write its results.

One design at a time in this process, or ``plan.workers`` worker processes on shared storage
(``sweep.worker``); after every trial the trials table is rewritten, at the end the study's meta
(``study.json``), the Pareto and roofline plots and the HTML report (``sweep.report``). A failed
trial (invalid design, OOM, CUDA error, crash, timeout, NaN logits) is recorded as FAIL with
``fail_reason`` and the study goes on; re-running the same command resumes it; trials left RUNNING
by a killed run are marked FAIL (``interrupted``) and their designs queued again.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import optuna

from .analysis.memory import check_time
from .caches.ceiling_cache import measure_ceilings
from .common.atomic import write_json
from .common.env import environment
from .measure import forked
from .objective import Objective, model_calibration
from .report import html_report, plots, tables
from .report.progress import StudyProgress, TaskProgress
from .runs import run_predicted, run_trials
from .space import distinct_designs, study_grid
from .storage import claim_results, failed_designs, finished, open_study, recover_interrupted, shown
from .worker import run_workers


def _ceilings(plan) -> dict:
    """The device's measured ceilings (cached under ``results_dir``), with a bar while measured."""
    with TaskProgress("measuring the device's ceilings", quiet=plan.quiet) as bar:
        return measure_ceilings(plan.device, cache_dir=plan.cache("ceilings"), on_line=bar.on_line)


def run(plan):
    """Run (or resume) the study to ``plan.n_trials`` finished designs; write the results.

    With ``plan.workers`` > 1 the designs are measured by that many worker processes
    (``run_workers``); otherwise one at a time in this process.

    Returns:
        ``(study, trials DataFrame)``.
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # we print each trial ourselves
    claim_results(plan, check_only=True)  # another study's folder: refused before the study
    study = open_study(plan)  # exists (a bad storage URL is refused by its own error)
    claim_results(plan)
    recovered = recover_interrupted(study)
    grid = study_grid(plan)  # queued design by design only when the sampler is the grid
    grid_size = math.prod(map(len, grid.values())) if grid else None
    # a grid: its designs; no space: the one design (repeats only when n_trials asks); else 20,
    # never more than a small discrete space holds (NSGA-II over 12 designs runs 12)
    target = plan.n_trials or grid_size or (1 if not plan.space else 20)
    if not grid and plan.space and not plan.predict and (n := distinct_designs(plan)) is not None:
        target = min(target, n)
    done = finished(study)
    todo = max(0, target - done)
    if not plan.quiet:
        print(f"study {plan.name} ({shown(plan.storage)}): {done} designs done, "
              f"{todo} to run" + (f", {recovered} interrupted trial(s) queued again"
                                  if recovered else "")
              + (f", {plan.workers} workers" if plan.workers > 1 else ""), flush=True)
        if failed := failed_designs(study):
            print(f"  {failed} of them FAILED and are kept as results, not measured again; a "
                  "new study.name measures them afresh (after a fix to a weights file, say)",
                  flush=True)
    t0 = time.time()
    if grid:  # designs are queued and taken once (``run_trials``), however many processes run
        plan = replace(plan, queue_only=True)
    if plan.workers > 1:
        model_calibration(plan, _ceilings(plan))  # once, before the workers
        forked.close_all()  # (each worker forks its trials from a server of its own)
        ceilings = run_workers(plan, target)
    else:
        # no device for a predict-only study: the performance model's figures, no ceilings
        ceilings = {} if plan.predict else _ceilings(plan)
        if not plan.predict and not plan.space:  # one design that cannot end within its
            check_time(plan.base, plan.workload, ceilings)  # timeout: refused before calibrating
        progress = StudyProgress(target, initial=target - todo, quiet=plan.quiet)
        loop = run_predicted if plan.predict else run_trials
        try:
            loop(study, Objective(plan, ceilings, target, progress), grid or None, target,
                 after=lambda: tables.write_table(tables.trials_frame(study), plan.results))
        finally:
            progress.close()
            forked.close_all()  # the trials' fork server, not kept past the study
    df = tables.trials_frame(study)
    tables.write_table(df, plan.results)
    write_json(plan.results / "study.json", {
        "study": plan.name, "storage": shown(plan.storage), "experiment": plan.experiment,
        "objectives": plan.objectives, "directions": plan.directions, "workload": plan.workload,
        "base_model": plan.base.to_dict(), "space": plan.space, "constraints": plan.constraints,
        "mode": plan.mode, "workers": plan.workers, "predict": plan.predict,
        "calibration": str(Path(plan.calibration).resolve()) if plan.calibration else None,
        "run_wall_s": time.time() - t0,
        "hardware_spec": plan.spec.__dict__, "ceilings": ceilings,
        "env": environment(plan.device)})
    if plan.shadow:
        shadow_predictions(plan)
    plots.pareto_plot(df, plan.objectives, plan.directions, plan.results, title=plan.name)
    plots.roofline_plot(df, plan.results, title=plan.name)
    html_report.write_report(plan.results)
    return study, df


def shadow_predictions(plan) -> list:
    """On the CPU fallback: the study's real designs (its configured model, workload and space:
    ``plan.shadow``) priced on each GPU it names, from the calibration shipped for that GPU
    (``sweep.analysis.calibration_store.shipped``; roofline x stated efficiencies without one), written to
    ``<results>/predicted_<target>.csv``; a short table printed. Returns the files written."""
    import pandas as pd

    from .analysis import calibration_store as store
    from .analysis.hardware import load_spec
    from .analysis.pricing import Calibrated
    from .analysis.targets import predict_designs
    from .common.atomic import write_atomic
    from .report.tables import predicted_summary
    from .space import study_designs

    sh = plan.shadow
    dropped: list[str] = []  # the space's designs the configured model cannot run, and why
    items = study_designs(sh["space"], sh["base"], sh["workload"], sh["mode"], left_out=dropped)
    out = []
    for name in sh["targets"]:
        try:  # the command's spec where it is this one (its hardware.FIELD overrides)
            spec = plan.spec if name == plan.spec.name else load_spec(name)
        except KeyError as e:
            print(f"predicted designs: {e}", flush=True)
            continue
        have = store.shipped_for(spec)
        priced = Calibrated(have) if have else None
        df = pd.DataFrame(predict_designs(items, spec, priced, sh["constraints"]))
        path = write_atomic(plan.results / f"predicted_{spec.name}.csv",
                            lambda p, df=df: df.to_csv(p, index=False))
        out.append(path)
        if not plan.quiet:
            wl = sh["workload"]
            per = [k for k in ("batch", "prompt_len") if any(w[k] != wl[k] for _, w, _ in items)]
            print(f"\nthe real designs ({sh['base'].name}, "
                  + ", ".join(f"{k.replace('_len', '')} {'per design' if k in per else wl[k]}"
                              for k in ("batch", "prompt_len"))
                  + f", kernels={sh['base'].kernels}, mode={sh['mode']}), PREDICTED on "
                  f"{spec.display or spec.name} (no GPU here; {path.name}):",
                  flush=True)
            print(predicted_summary(df, plan.objectives, plan.directions), flush=True)
            if dropped:
                why = "; ".join(dict.fromkeys(dropped))
                print(f"({len(dropped)} of the space's {len(dropped) + len(items)} designs left out: "
                      f"{why})", flush=True)
    return out

