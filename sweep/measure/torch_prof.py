"""torch.profiler per stage: op table, kernel time by category, GPU timeline, trace file.

Run outside the timed repeats (the profiler adds host overhead), over one prefill and a few decode
steps. Per stage the row gets:

- the op table (``key_averages(group_by_input_shape=True)``: name, input shapes, calls, self device
  time, self CPU time, FLOPs where torch counts them) as ``torch_ops_<stage>.csv`` in the trial
  folder, and the five ops with the most self device time (CPU time on a CPU run) as JSON;
- kernel time by category (``CATEGORIES``: GEMM, attention, norm, elementwise, memory copy,
  other), as shares of the stage's kernel time;
- from the kernel timeline: GPU active % (union of kernel intervals over the window, first kernel
  start to last kernel end) and idle-gap statistics (count, median, p90, max, in us);
- the CPU-to-GPU time ratio: host time to issue the window (wall time until the last launch
  returns, before the synchronize) over the union of kernel time; above 1 the host cannot keep the
  GPU fed (launch-bound; the "CPU-bound" symptom in PyTorch's performance tuning guide);
- ``{stage}_profiler_flops``: FLOPs torch's formulas count for matmul/conv ops (``with_flops``);
- the Chrome trace ``trace_<stage>.json`` (opens in https://ui.perfetto.dev and chrome://tracing).

On a CPU run there are no kernels: the op table and the trace are kept, the GPU figures are NaN with
``{stage}_gpu_active_pct_reason``.
"""

from __future__ import annotations

import csv
import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path

from .child import child_failure, run_child
from .timing import spread
from .window import options

# First match wins; names of cuBLAS/cuDNN/Triton/ATen kernels seen on the H100 (2026-11-22).
CATEGORIES = (
    ("attention", re.compile(r"flash|fmha|sdpa|attention|cudnn|_split_kernel|_combine_kernel|"
                             r"_decode_attn", re.I)),
    ("gemm", re.compile(r"gemm|nvjet|cutlass|xmma|cublas|splitKreduce|sm90_|matmul|_mm_", re.I)),
    ("norm", re.compile(r"norm|rsqrt|_rms", re.I)),
    ("memory copy", re.compile(r"memcpy|memset|copy_kernel|CatArrayBatchedCopy|index_copy|gather|"
                               r"index_elementwise|indexSelect", re.I)),
    ("elementwise", re.compile(r"elementwise|silu|swiglu|rope|pow_|mul|add|reduce_kernel|_quant",
                               re.I)),
)


def category(kernel: str) -> str:
    """Category of a kernel name (first of ``CATEGORIES`` whose pattern matches, else ``other``)."""
    for name, pat in CATEGORIES:
        if pat.search(kernel):
            return name
    return "other"


def timeline(intervals: list[tuple[float, float]]) -> dict:
    """GPU active % and idle gaps from kernel ``(start, end)`` intervals (any time unit, here us).

    Returns:
        ``active_pct`` (union of intervals / span from first start to last end, %), ``span``,
        ``busy`` (union length), ``gaps`` (count of idle gaps), ``gap_median``, ``gap_p90``,
        ``gap_max`` (same unit as the input; NaN without gaps).
    """
    if not intervals:
        nan = math.nan
        return {"active_pct": nan, "span": nan, "busy": nan, "gaps": 0, "gap_median": nan,
                "gap_p90": nan, "gap_max": nan}
    iv = sorted(intervals)
    busy, gaps = 0.0, []
    cur_s, cur_e = iv[0]
    for s, e in iv[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps.append(s - cur_e)
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    span = cur_e - iv[0][0]
    g = spread(gaps) if gaps else {"median": math.nan, "p90": math.nan, "max": math.nan}
    return {"active_pct": 100 * busy / span if span > 0 else math.nan, "span": span,
            "busy": busy, "gaps": len(gaps), "gap_median": g["median"], "gap_p90": g["p90"],
            "gap_max": g["max"]}


def _kernel_events(prof) -> list:
    from torch.autograd import DeviceType

    return [e for e in prof.events() if e.device_type == DeviceType.CUDA]


def profile_stage(fn: Callable[[], object], stage: str, trial_dir: Path | None, cuda: bool,
                  tokens: int) -> dict:
    """Run ``fn`` (one stage window) under ``torch.profiler`` and return the row's columns.

    Args:
        fn: runs the window (launches only; this function synchronizes after it).
        stage: ``prefill`` or ``decode`` (column prefix and file names).
        trial_dir: where ``torch_ops_<stage>.csv`` and ``trace_<stage>.json`` go (None: not kept).
        cuda: whether the window runs on a GPU (kernel activities recorded).
        tokens: tokens the window produces (for ``{stage}_profiler_flops_per_token``).

    Returns:
        ``{stage}_torch_top_ops`` (JSON), ``{stage}_kernel_share_<category>`` (0..1),
        ``{stage}_gpu_active_pct``, ``{stage}_gpu_gaps``, ``{stage}_gpu_gap_median_us``,
        ``_p90_us``, ``_max_us``, ``{stage}_cpu_gpu_ratio``, ``{stage}_profiler_flops``,
        ``{stage}_torch_kernels``, ``{stage}_trace`` (path) and NaN reasons.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts, record_shapes=True, with_flops=True) as prof:
        t0 = time.perf_counter()
        fn()
        host_s = time.perf_counter() - t0
        if cuda:
            torch.cuda.synchronize()
    p = f"{stage}_"
    out: dict = {}
    from torch.autograd import DeviceType

    ka = prof.key_averages(group_by_input_shape=True)
    dev_key = "self_device_time_total" if cuda else "self_cpu_time_total"
    # host-side ops only (aten::...); kernels appear in the categories below
    ops = sorted((e for e in ka if e.device_type == DeviceType.CPU),
                 key=lambda e: -getattr(e, dev_key))
    table = [{"op": e.key, "input_shapes": json.dumps(e.input_shapes), "calls": e.count,
              "self_device_us": getattr(e, "self_device_time_total", 0.0),
              "self_cpu_us": e.self_cpu_time_total, "flops": e.flops} for e in ops]
    out[p + "torch_top_ops"] = json.dumps(
        [{k: r[k] for k in ("op", "input_shapes", "calls", "self_device_us" if cuda
                            else "self_cpu_us")} for r in table[:5]])
    out[p + "profiler_flops"] = float(sum(e.flops for e in ka if e.flops))
    out[p + "profiler_flops_per_token"] = out[p + "profiler_flops"] / tokens if tokens else math.nan
    if trial_dir is not None:
        trial_dir.mkdir(parents=True, exist_ok=True)
        with open(trial_dir / f"torch_ops_{stage}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]) if table else ["op"])
            w.writeheader()
            w.writerows(table)
        trace = trial_dir / f"trace_{stage}.json"
        prof.export_chrome_trace(str(trace))
        out[p + "trace"] = str(trace)
    kernels = _kernel_events(prof) if cuda else []
    if not kernels:
        why = "CPU run: no GPU kernels" if not cuda else "the profiler recorded no GPU kernels"
        for k in ("gpu_active_pct", "cpu_gpu_ratio"):
            out[p + k] = math.nan
            out[p + k + "_reason"] = why
        return out
    iv = [(e.time_range.start, e.time_range.end) for e in kernels]
    tl = timeline(iv)
    shares: dict[str, float] = {name: 0.0 for name, _ in CATEGORIES}
    shares["other"] = 0.0
    total = sum(e - s for s, e in iv) or math.nan
    for e in kernels:
        shares[category(e.name)] += (e.time_range.end - e.time_range.start) / total
    for name, v in shares.items():
        out[p + "kernel_share_" + name.replace(" ", "_")] = v
    out.update({p + "torch_kernels": len(kernels), p + "gpu_active_pct": tl["active_pct"],
                p + "gpu_gaps": tl["gaps"], p + "gpu_gap_median_us": tl["gap_median"],
                p + "gpu_gap_p90_us": tl["gap_p90"], p + "gpu_gap_max_us": tl["gap_max"],
                p + "cpu_gpu_ratio": host_s * 1e6 / tl["busy"]})
    return out


def allocator_stats() -> dict:
    """The CUDA caching allocator's figures (``torch.cuda.memory_stats``) for the row: peak
    allocated and reserved bytes, their ratio, allocation count, retries and OOMs."""
    import torch

    s = torch.cuda.memory_stats()
    alloc, res = s.get("allocated_bytes.all.peak", 0), s.get("reserved_bytes.all.peak", 0)
    return {"alloc_peak_bytes": alloc, "reserved_peak_bytes": res,
            "reserved_over_allocated": res / alloc if alloc else math.nan,
            "alloc_count": s.get("allocation.all.allocated", 0),
            "alloc_retries": s.get("num_alloc_retries", 0), "alloc_ooms": s.get("num_ooms", 0)}


def torch_windows(gen, prompt, spec: dict) -> dict:
    """Child side of ``profile.torch``: after a warm-up (and graph capture), one prefill and
    ``options.torch_decode_steps`` decode steps, each under ``torch.profiler``
    (``profile_stage``), in the trial's decode mode. Runs in a child of its own, so neither the
    profiler nor cuBLASLt's log touches the timed repeats.

    Args:
        gen: a ``zoo.Generator``; prompt: ``[B, T]`` token ids; spec: the trial spec.
    """
    import torch

    B, T = prompt.shape
    n = options(spec).get("torch_decode_steps", 8)
    n = max(1, min(n, spec["workload"]["new_tokens"] - 1))
    trial_dir = Path(spec["trial_dir"]) if spec.get("trial_dir") else None
    cuda = spec["device"] == "cuda"
    first = gen.prefill(prompt).argmax(-1, keepdim=True)
    for _ in range(n):  # warm-up: graphs captured, allocator settled
        first = gen.decode_greedy(first).clone()
    state = {}

    def prefill():
        state["tok"] = gen.prefill(prompt).argmax(-1, keepdim=True)

    def decode_window():
        for _ in range(n):
            state["tok"] = gen.decode_greedy(state["tok"])

    out = profile_stage(prefill, "prefill", trial_dir, cuda, B * T)
    if cuda:
        torch.cuda.synchronize()
    out.update(profile_stage(decode_window, "decode", trial_dir, cuda, B * n))
    out["torch_decode_steps"] = n
    return out


def wanted(profile: dict) -> bool:
    """Whether the trial's ``profile`` asks for torch.profiler or cuBLASLt's GEMM log."""
    return bool(profile.get("torch") or profile.get("cublaslt_log"))


def profile_trial(spec: dict, trial_dir: Path, cfg, workload: dict, ceilings: dict) -> dict:
    """``profile.torch`` (``torch_windows``) and ``profile.cublaslt_log``
    (``sweep.measure.cublaslt``) in one more child run (``<trial_dir>/torch/``);
    ``torch_profile_reason`` on failure. Arguments as ``sweep.measure.ncu.profile_trial``."""
    from . import cublaslt

    d = trial_dir / "torch"
    d.mkdir(parents=True, exist_ok=True)
    child = dict(spec, profile_window="torch", trial_dir=str(d), env=dict(spec.get("env", {})))
    log = (d / "cublaslt.log").resolve()
    log.unlink(missing_ok=True)
    if spec["profile"].get("cublaslt_log"):
        child["env"].update(cublaslt.env(log))
    res = run_child(child, d, workload.get("timeout_s", 900.0))
    if res.get("status") != "ok":
        return {"torch_profile_reason": child_failure(res)[:600]}
    out = dict(res["measured"]) if spec["profile"].get("torch") else {}
    if spec["profile"].get("cublaslt_log"):
        try:
            out.update(cublaslt.summarize(d))
        except ValueError as e:
            out.update(gemm_shapes=math.nan, gemm_shapes_reason=str(e)[:300])
    return out
