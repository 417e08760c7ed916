"""``python -m sweep.cli.advise [model=NAME] [model.FIELD=V ...] [workload=NAME] [hardware=SPEC]
[--bench] [--measure] [--out DIR]``: the design advisor (``sweep.analysis.advice``).

The design and workload are composed as ``python -m sweep`` composes them (Hydra overrides); the
target is ``hardware=`` (default: this machine's device). The calibration is the target's own
(``results/calibration/``, or ``--calibration FILE``), transferred to another NVIDIA GPU from
``--calibration``'s device; with neither, the what-if's prices (a fit of public measurements, or the
roofline x stated efficiencies: neither sees alignment) and it says so.

- ``--bench`` (on the calibration's own GPU): the GEMM shapes of the design and its alternatives
  that the calibration lacks are micro-benchmarked first (``sweep.measure.calibration_run``: the
  calibration's own protocol, at the workload's M), then priced.
- ``--measure`` (on a GPU): the design and the first suggestion are measured as a study measures
  a trial (``sweep.measure.trial`` in a child process), and the measured gain in the targeted stage is set
  beside the predicted one.

Writes ``advise.json`` and ``advise.md`` to ``--out`` (default ``<results_dir>/advise/<label>``: the
design's fields (``advice.design_of``), the target and the workload, so advice on another never
overwrites it).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from pathlib import Path

from zoo import counts

from ..analysis.advice import AdviseConf, advise
from ..analysis.targets import fits_memory, misfit
from ..common.atomic import write_json, write_text
from ..common.env import CONF, slug
from ..common.row import TIME, spread_of


def _plan(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from ..config.overrides import refuse_bad_overrides, with_model_fields
    from ..config.schema import register
    from ..plan import plan_from_config

    register()
    overrides = with_model_fields(overrides)
    refuse_bad_overrides(overrides)  # a bad one: one error line, exit 2
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[*overrides, "quiet=true"])
    return plan_from_config(cfg)


def _calibration(plan, path: str | None, device: dict):
    """The target's ``Calibrated``, or None: ``--calibration``'s file, else the target's own
    (this device's cache when the target is this device, else the one shipped for the target's
    GPU), else this device's transferred to an NVIDIA target when it has the ceilings a transfer
    needs (a CPU's calibration has no bf16 GEMM ceiling: never transferred to a GPU)."""
    from ..analysis import calibration_store as store
    from ..analysis.pricing import Calibrated
    from ..analysis.targets import _is_device, calibration_for

    if path:
        have = store.load_file(path)
    elif _is_device(plan.spec, device.get("name")):
        have = store.load(device["name"], cal_dir=plan.cache("calibration")) or \
            store.with_code_staleness(store.shipped(device["name"]))
    else:
        have = store.shipped_for(plan.spec) or store.load(device.get("name", ""),
                                                      cal_dir=plan.cache("calibration"))
    if have is None:
        return None
    src, key = have.meta, f"gemm_flops_{plan.base.dtype}"
    if _is_device(plan.spec, src.get("device")) or key in (src.get("ceilings") or {}):
        c = calibration_for(plan.spec, Calibrated(have), plan.base.dtype)[0]  # (predict_on's rule)
        if c is not None:
            return c
    if path:  # the user's file cannot price this target: said, not silently the roofline
        why = (f"no {key} ceiling to transfer it by" if plan.spec.vendor == "NVIDIA" else
               f"a calibration transfers to NVIDIA GPUs only, {plan.spec.name} is "
               f"{plan.spec.vendor}'s")
        raise ValueError(f"--calibration {path}: measured on {src.get('device')!r}, it cannot "
                         f"price {plan.spec.name} (not that device; {why}); leave it out for "
                         "the target's own prices")
    return None


def _measure(plan, cfg, out: Path, tag: str) -> dict:
    from ..measure.child import run_child, trial_spec

    spec = trial_spec(cfg, plan.workload, "cuda", plan.mode, out / tag, seed=plan.seed)
    res = run_child(spec, out / tag, plan.workload.get("timeout_s", 900.0))
    if res.get("status") != "ok":
        return {"error": res.get("reason") or res.get("error_type") or "failed"}
    cols = [c for t in TIME.values() for c in (t, *spread_of(t))]
    return {k: res["measured"].get(k) for k in cols}


def out_label(r: dict) -> str:
    """The default output folder's name for the advice ``r``: its design's fields
    (``advice.design_of``), target and workload, so advice on another design, target or workload
    never overwrites it; past 160 characters cut to 140 and a hash of the whole (a file name
    stays under 255 bytes)."""
    w = r["workload"]
    label = slug("_".join(f"{k}{v}" for k, v in r["design"].items())
                 + f"_on_{r['target']}_b{w['batch']}_p{w['prompt_len']}_n{w['new_tokens']}")
    if len(label) > 160:
        label = label[:140] + "_" + hashlib.sha1(label.encode()).hexdigest()[:12]
    return label


def markdown(r: dict) -> str:
    """The advice as a Markdown section (``advise.md``)."""
    d = ", ".join(f"{k}={v}" for k, v in r["design"].items())
    w = r["workload"]
    lines = [f"## Design advice: {r.get('model', 'design')} ({d})", "",
             *([f"**{r['memory_note']}**", ""] if r.get("memory_note") else []),
             f"Target {r['target']}; batch {w['batch']}, prompt {w['prompt_len']}; prices: "
             f"{r['basis']}. Predicted TTFT {r['predicted']['prefill_pred_ms']:.3g} ms, TPOT "
             f"{r['predicted']['decode_pred_ms']:.3g} ms.", "", "Findings:", ""]
    lines += [f"- `{f['field']}` = {f['value']} ({f['rule']}): {f['detail']}"
              for f in r["findings"]] or ["- none: every rule holds"]
    lines += ["", "| alternative | params | TTFT gain | TPOT gain | targets |",
              "| --- | --- | --- | --- | --- |"]
    lines += [f"| {a['label']}{' (*)' if a.get('stand_ins') else ''} | "
              f"{a['params_change_pct']:+.1f}% | {a['prefill_gain_pct']:+.1f}% | "
              f"{a['decode_gain_pct']:+.1f}% | {a['target_stage']} |" for a in r["alternatives"]]
    if not r["alternatives"]:
        lines.append("| none predicted faster within the band | | | | |")
    if any(a.get("stand_ins") for a in r["alternatives"]):
        lines += ["", "(*) its price or the design's rests on kernels priced by another's entry "
                      "(a stand-in, `prediction_notes`): the gain may be the stand-in's"]
    if r.get("missing_shapes"):
        lines += ["", "GEMM shapes priced from the nearest calibrated shape (their own alignment "
                      "unseen; `--bench` measures them): "
                  + ", ".join(f"N={n} K={k}" for n, k in r["missing_shapes"])]
    if m := r.get("measured"):
        lines += ["", f"Measured on {m.get('device', 'this GPU')}: {m.get('summary', '')}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The command line (the module's text): 0 once ``advise.{json,md}`` are written, 2 on a
    bad design, override or option, or a target that is not a GPU (one ``error:`` line), 1
    when ``--bench`` fails.

    Raises:
        ValueError: ``--band`` outside [0, 1), ``--top`` below 1, an unknown spec, a file that
            is not a calibration. FileNotFoundError: no ``--calibration`` file.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as python -m sweep takes them")
    ap.add_argument("--calibration", help="a calibration .json (default: the target device's)")
    ap.add_argument("--band", type=float, default=AdviseConf.band,
                    help="non-embedding parameter band of the alternatives (fraction)")
    ap.add_argument("--top", type=int, default=AdviseConf.top,
                    help="how many alternatives to show, fastest predicted first")
    ap.add_argument("--bench", action="store_true",
                    help="micro-benchmark the GEMM shapes the calibration lacks first (GPU)")
    ap.add_argument("--measure", action="store_true",
                    help="measure the design and the first suggestion (GPU)")
    ap.add_argument("--out", help="the folder for the advice and any measured rows "
                    "(default: <results_dir>/advise/<design>)")
    a = ap.parse_args(argv)
    AdviseConf(band=a.band, top=a.top)  # the options refused before any work
    from zoo.config import DesignError

    from ..analysis.hardware import load_spec
    from ..common.env import detect_device

    device = detect_device("auto")
    try:
        # the target: hardware=, else this machine's device (a CPU's refused below)
        here = [] if any(o.startswith("hardware=") for o in a.overrides) else \
            [f"hardware={load_spec('auto', device['name']).name}"]
        plan = _plan(list(a.overrides) + ["study.predict=true"] + here)
    except (DesignError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # Hydra's composition errors name the override
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if (a.bench or a.measure) and device["type"] != "cuda":
        print("error: --bench and --measure need a CUDA GPU", file=sys.stderr)
        return 2
    try:
        cal = _calibration(plan, a.calibration, device)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if plan.spec.kind != "gpu":  # as report.html says on such a study
        what = (f"hardware={plan.spec.name} is" if not here else
                f"this machine ({plan.spec.name}, the target without hardware=) is")
        print(f"error: {what} not a GPU (kind {plan.spec.kind}): the advisor's rules are a "
              "GPU's (tensor-core alignment, tile and wave quantization); name a GPU "
              "(hardware=h100_sxm), or predict the design there with a predict-only study "
              f"(python -m sweep ... study.predict=true hardware={plan.spec.name})",
              file=sys.stderr)
        return 2
    conf = AdviseConf(band=a.band, top=a.top, mode=plan.mode)
    r = advise(plan.base, plan.workload, plan.spec, cal, conf)
    if a.bench and cal is not None and r["missing_shapes"]:
        import tempfile

        import pandas as pd

        from ..measure import calibration_run

        B, T = plan.workload["batch"], plan.workload["prompt_len"]
        spec = {"device": "cuda", "switches": plan.switches.to_dict(),
                "gemm": [[M, n, k] for n, k in r["missing_shapes"] for M in sorted({B, B * T})]}
        with tempfile.TemporaryDirectory() as d:
            rc, tail = calibration_run.run(spec, Path(d) / "gemms.parquet")
            if rc != 0:
                print(f"error: --bench: {tail}", file=sys.stderr)
                return 1
            rows = pd.read_parquet(Path(d) / "gemms.parquet")
        cal.t = pd.concat([cal.t, rows], ignore_index=True)
        cal._fits.clear()
        benched = r["missing_shapes"]
        r = advise(plan.base, plan.workload, plan.spec, cal, conf)
        r["benched_shapes"] = benched
    r["model"] = plan.base.name
    need = counts.memory_need(plan.base, plan.workload["batch"], plan.workload["prompt_len"],
                              plan.workload["new_tokens"])["total"]
    fit = {"fits_memory": fits_memory(need, plan.spec), "memory_needed_bytes": need}
    if why := misfit(fit, plan.spec):  # as a study prunes it: the advice is for a design that
        r.update(fits_memory=False, memory_note=why)  # cannot run there, said first
    # under the command's results_dir (its default: results/ in designzoo's folder)
    out = Path(a.out) if a.out else plan.results.parent / "advise" / out_label(r)
    out.mkdir(parents=True, exist_ok=True)
    if a.measure and r["alternatives"]:
        first = r["alternatives"][0]
        base_m = _measure(plan, plan.base, out, "design")
        alt_m = _measure(plan, plan.base.replace(**first["overrides"]), out, "suggestion")
        st = first["target_stage"]
        col = TIME[st]
        m = {"device": device["name"], "design": base_m, "suggestion": alt_m, "stage": st}
        if "error" not in base_m and "error" not in alt_m:
            gain = 100 * (1 - alt_m[col] / base_m[col])
            pred = first["gain_pct"]
            m.update(measured_gain_pct=gain, predicted_gain_pct=pred,
                     faster=bool(gain > 0),
                     gain_ratio=gain / pred if pred else math.nan)
            m["summary"] = (f"{first['label']}: {st} {base_m[col]:.3f} -> {alt_m[col]:.3f} ms, "
                            f"measured gain {gain:+.1f}% vs predicted {pred:+.1f}%")
        r["measured"] = m
    write_json(out / "advise.json", r)
    write_text(out / "advise.md", markdown(r))
    print(markdown(r))
    print(f"written: {out}/advise.{{json,md}}")
    return 0


if __name__ == "__main__":
    from ..common.entry import entry

    sys.exit(entry(main))
