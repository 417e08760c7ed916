"""Nsight Compute per stage: build the ``ncu`` command, parse its CSV, sum per stage.

The trial's child runs again under ``ncu`` (an argument list, never a shell string) with
``--profile-from-start off``: the child brackets exactly the profiled region with
``cudaProfilerStart/Stop`` (prefill: one call; decode: steps ``A..B`` of a loop, as TensorRT-LLM's
``TLLM_PROFILE_START_STOP`` does), so the report holds that stage's kernels only and stays small.
``--clock-control none`` leaves the GPU's clocks as they are.

Two metric sets, two runs per stage, because kernel replay costs one pass per group of counters:
``memory`` (kernel time and DRAM bytes, 1 pass) over every kernel of the window gives the stage's
totals; ``detail`` (everything in ``METRICS``, 16 passes on an H100, ~0.46 s per kernel) runs over
a sample of the window only: the layers named in ``profile.options.ncu_detail_layers`` (default
layer 0) and the LM head. The zoo's layers are identical in shape, so one layer's rates (L2 hit,
tensor pipe, occupancy, stalls) stand for all; the sample's scope is written in the row
(``{stage}_ncu_detail_scope``). Measured on the H100 (2026-11-22): the full set over a whole
Llama-3.2-1B decode step (701 kernels with the torch kernels) took over 150 s, the memory set 41 s
(process start included; ``results/reference/ncu_probe_h100.json``).

Metrics (Hopper names, checked against ``ncu --query-metrics --chip gh100``): DRAM bytes read and
written, L2 sector hit rate, tensor-pipe active %, SM throughput %, achieved occupancy (warps
active % of peak), bf16 tensor ops, and the per-issue stall ratios whose largest is the top stall
reason (Nsight Compute Kernel Profiling Guide, "Warp Scheduler States").
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from pathlib import Path

from .child import child_failure, run_child
from .window import DECODE_WINDOW, options

STALLS = ("long_scoreboard", "short_scoreboard", "wait", "math_pipe_throttle", "mio_throttle",
          "lg_throttle", "barrier", "not_selected", "no_instruction", "gmma", "membar", "drain",
          "imc_miss", "branch_resolving", "dispatch_stall", "sleeping", "tex_throttle", "misc",
          "selected")
METRICS = {
    "time_ns": "gpu__time_duration.sum",
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "tensor_pipe_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "tensor_ops_bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    **{f"stall_{s}": f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio"
       for s in STALLS},
}
_PREFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


METRIC_SETS = {"memory": ("time_ns", "dram_read", "dram_write"), "detail": tuple(METRICS)}


def command(csv_path: str | Path, metrics: str = "detail", ncu: str = "ncu",
            extra: tuple[str, ...] = ()) -> list[str]:
    """The ``ncu`` argument list to put before the child's own command.

    Args:
        csv_path: where ncu writes its log and the raw-page CSV.
        metrics: a key of ``METRIC_SETS``.
        extra: more ncu metric names to collect (a probe's own; ``parse_csv(extra=...)`` reads
            them back under these names).

    Raises:
        ValueError: unknown metric set.
    """
    if metrics not in METRIC_SETS:
        raise ValueError(f"ncu metric set {metrics!r} is not one of {', '.join(METRIC_SETS)}")
    names = ",".join([METRICS[k] for k in METRIC_SETS[metrics]] + list(extra))
    return [ncu, "--clock-control", "none", "--profile-from-start", "off",
            "--target-processes", "all", "--metrics", names,
            "--csv", "--page", "raw", "--print-units", "base", "--log-file", str(csv_path)]


def available(ncu: str = "ncu") -> str | None:
    """None if ``ncu`` can be run, else the reason it cannot."""
    return None if shutil.which(ncu) else f"{ncu} not found on PATH (Nsight Compute not installed)"


def _num(text: str, unit: str = "") -> float:
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A"):
        return float("nan")
    v = float(t)
    u = unit.strip()
    if u.endswith("byte") and u[:-4] in _PREFIX:  # in case units were not printed in base
        v *= _PREFIX[u[:-4]]
    elif u in ("usecond", "us"):
        v *= 1e3
    elif u in ("msecond", "ms"):
        v *= 1e6
    return v


def parse_csv(text: str, extra: tuple[str, ...] = ()) -> list[dict]:
    """Per-kernel rows from ``ncu --csv --page raw`` output (tool lines before the header and the
    units row after it are skipped). Each row: ``kernel``, ``id``, the ``METRICS`` keys and each
    ncu metric name in ``extra`` (NaN where ncu did not report it).

    Raises:
        ValueError: no CSV header (``"ID"``) in the text, e.g. ncu refused to profile; the
            message carries ncu's own lines.
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        tool = " | ".join(ln for ln in lines if ln.startswith("==")) or text[-500:]
        raise ValueError(f"no ncu CSV in the output: {tool[:800]}")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], rows[1:]
    units = {}
    if body and not body[0][0].strip():  # the units row
        units = dict(zip(header, body[0]))
        body = body[1:]
    out = []
    for r in body:
        if len(r) != len(header) or not r[0].strip():
            continue
        d = dict(zip(header, r))
        row = {"id": int(d["ID"]), "kernel": d.get("Kernel Name", "")}
        for key, metric in [*METRICS.items(), *((m, m) for m in extra)]:
            row[key] = _num(d[metric], units.get(metric, "")) if metric in d else float("nan")
        out.append(row)
    return out


def stage_summary(rows: list[dict], stage: str, steps: int = 1,
                  detail: list[dict] | None = None) -> dict:
    """Per-stage results-row columns from the kernel rows of one profiled window.

    Args:
        rows: every kernel of the window (at least the ``memory`` set).
        stage: ``prefill`` or ``decode`` (the column prefix).
        steps: decode steps in the window; byte, time and kernel counts are divided by it.
        detail: kernel rows of the ``detail`` run over a sample of the window; where given, the
            rates (L2 hit, tensor pipe, SM throughput, occupancy, stalls) and the tensor FLOPs
            come from it instead of ``rows``.

    Returns:
        ``{stage}_dram_bytes`` (read + written, bytes per step), ``_dram_read_bytes``,
        ``_dram_write_bytes``, ``_ncu_time_ms`` (sum of kernel durations per step),
        ``_ncu_kernels``, ``_l2_hit_pct``, ``_tensor_pipe_pct``, ``_sm_throughput_pct``,
        ``_occupancy_pct`` (weighted by kernel time), ``_tensor_flops_bf16`` (FLOP, of the rows
        that carry them, per step), ``_top_stall`` (largest time-weighted stall ratio; Kernel
        Profiling Guide, "Warp Scheduler States") and ``_ncu_top_kernels`` (JSON: the five
        largest kernels' time shares).
    """
    t = sum(r["time_ns"] for r in rows if not math.isnan(r["time_ns"])) or float("nan")

    def total(key):
        return sum(r[key] for r in rows if not math.isnan(r[key]))

    rates = rows if detail is None else detail
    rate_steps = steps if detail is None else 1

    def rmean(key):
        pts = [(r[key], r["time_ns"]) for r in rates if not math.isnan(r[key])]
        w = sum(x for _, x in pts)
        return sum(v * x for v, x in pts) / w if w else float("nan")

    stalls = {s: rmean(f"stall_{s}") for s in STALLS}
    stalls = {k: v for k, v in stalls.items() if not math.isnan(v) and k != "selected"}
    by_kernel: dict[str, float] = {}
    for r in rows:
        by_kernel[r["kernel"]] = by_kernel.get(r["kernel"], 0.0) + r["time_ns"]
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1])[:5]
    p = f"{stage}_"
    return {
        p + "ncu_kernels": len(rows) / steps,
        p + "ncu_time_ms": t / 1e6 / steps,
        p + "dram_bytes": (total("dram_read") + total("dram_write")) / steps,
        p + "dram_read_bytes": total("dram_read") / steps,
        p + "dram_write_bytes": total("dram_write") / steps,
        p + "l2_hit_pct": rmean("l2_hit_pct"),
        p + "tensor_pipe_pct": rmean("tensor_pipe_pct"),
        p + "sm_throughput_pct": rmean("sm_throughput_pct"),
        p + "occupancy_pct": rmean("occupancy_pct"),
        p + "tensor_flops_bf16": sum(r["tensor_ops_bf16"] for r in rates
                                     if not math.isnan(r["tensor_ops_bf16"])) / rate_steps,
        p + "top_stall": max(stalls, key=stalls.get) if stalls else "",
        p + "ncu_top_kernels": json.dumps({k[:80]: round(v / t, 4) for k, v in top}),
    }


def wanted(profile: dict) -> bool:
    """Whether the trial's ``profile`` asks for Nsight Compute."""
    return bool(profile.get("ncu"))


def profile_trial(spec: dict, trial_dir: Path, cfg, workload: dict, ceilings: dict) -> dict:
    """Per-stage Nsight Compute figures of one trial, or ``{stage}_ncu_reason``.

    Per stage two child runs under ``ncu``, launched eagerly (the same kernels as a graph
    replay; hooks mark the sample): the ``memory`` set over the whole window (DRAM bytes and
    time of every kernel) and the ``detail`` set over ``ncu_detail_layers`` and the LM head.
    Adds ``{stage}_dram_bytes_over_min`` (measured / analytic minimum bytes),
    ``_arith_intensity_measured`` (analytic matmul FLOPs / measured bytes, FLOP/byte),
    ``_dram_bw_pct_of_measured`` (DRAM bytes / summed kernel time vs the measured copy
    ceiling) and ``_tensor_flops_over_analytic`` (bf16 tensor FLOPs measured on the sample
    / analytic matmul FLOPs of the same layers and LM head).

    Args:
        spec: the trial's spec (``sweep.measure.trial``); trial_dir: its folder (``ncu_<stage>_<set>/``
            subfolders are written); cfg: the ``ModelConfig``; workload: ``batch``,
            ``prompt_len``, ``new_tokens``, ``timeout_s``; ceilings: the measured ceilings.
    """
    from zoo import counts

    opts = options(spec)
    a, b = opts.get("ncu_decode_steps", DECODE_WINDOW)
    layers = list(opts.get("ncu_detail_layers", [0]))
    out = {}
    for stage in ("prefill", "decode"):
        why = available()
        if why is None:
            try:
                runs = {}
                for mset, extra in (("memory", {}), ("detail", {"ncu_sample": layers})):
                    d = trial_dir / f"ncu_{stage}_{mset}"
                    d.mkdir(parents=True, exist_ok=True)
                    res = run_child(dict(spec, profile_window=stage, mode="eager", **extra), d,
                                    workload.get("timeout_s", 900.0),
                                    wrapper=command(d / "ncu.csv", mset))
                    if res.get("status") != "ok":
                        raise ValueError(child_failure(res, f"{mset} run"))
                    rows = parse_csv((d / "ncu.csv").read_text())
                    if not rows:
                        raise ValueError(f"{mset} run: ncu profiled no kernels in the window")
                    runs[mset] = (rows, res["measured"]["profiled_steps"])
                rows, steps = runs["memory"]
                out.update(stage_summary(rows, stage, steps, detail=runs["detail"][0]))
                out[f"{stage}_ncu_detail_scope"] = (
                    f"layers {layers} of {cfg.n_layers} + lm_head"
                    + (f", decode step {a}" if stage == "decode" else ""))
            except (ValueError, OSError, KeyError) as e:
                why = f"ncu failed: {e}"[:600]
        if why is not None:
            out[f"{stage}_ncu_reason"] = why
            continue
        if stage == "prefill":
            st = counts.prefill(cfg, workload["batch"], workload["prompt_len"])
        else:  # the profiled steps' mean cache length
            st = counts.decode_step(cfg, workload["batch"], workload["prompt_len"] + (a + b - 1) // 2)
        meas = out[f"{stage}_dram_bytes"]
        out[f"{stage}_dram_bytes_over_min"] = meas / st.min_bytes
        out[f"{stage}_arith_intensity_measured"] = st.matmul_flops / meas if meas else math.nan
        out[f"{stage}_ncu_min_bytes"] = st.min_bytes
        peak = ceilings.get("copy_bytes_s", math.nan)
        t = out[f"{stage}_ncu_time_ms"] / 1e3
        out[f"{stage}_dram_bw_pct_of_measured"] = 100 * meas / t / peak if t else math.nan
        per_layer = sum(v for k, v in st.flops.items() if k != "lm_head") / cfg.n_layers
        sample_flops = len(layers) * per_layer + st.flops.get("lm_head", 0)
        out[f"{stage}_tensor_flops_over_analytic"] = (
            out[f"{stage}_tensor_flops_bf16"] / sample_flops if cfg.dtype == "bf16"
            else math.nan)
    return out
