"""Bottleneck class and diagnosis of each stage of a results row.

A stage is compute-, memory- or overhead-bound: measured hardware evidence decides first (the
profilers' DRAM bandwidth, tensor-pipe use, GPU-active share, CPU/GPU ratio), the analytic
utilizations (MFU, MBU against the measured ceilings) and the time over the roofline floor after.
The diagnosis text ties the class to the design fields that would move it.
"""

from __future__ import annotations

import math

from ..common.row import STAGES, TIME, mfu

# Thresholds: a stage that reaches 60% of a measured ceiling is bound by that resource (Nsight
# Compute's "Speed Of Light" section treats >60% of peak throughput as high utilization); one that
# reaches neither and takes well over its roofline floor (Williams, Waterman & Patterson 2009,
# "Roofline", CACM 52(4)) is bound by latency and launch overhead, not by the hardware's rates.
# From the kernel timeline: a GPU idle more than half the window, or a host that needs longer to
# issue the work than the GPU needs to run it (CPU/GPU time ratio > 1), is launch-bound (PyTorch
# Performance Tuning Guide, "CPU-bound"; Nsight Systems User Guide, "GPU idle" analysis).
BOUND_FRAC = 0.6
OVERHEAD_FLOOR_RATIO = 2.0
GPU_IDLE_ACTIVE_PCT = 50.0
CPU_GPU_RATIO = 1.0


def classify(mfu: float, mbu: float, time_over_floor: float, *, dram_pct: float = math.nan,
             tensor_pct: float = math.nan, gpu_active_pct: float = math.nan,
             cpu_gpu_ratio: float = math.nan) -> str:
    """``compute-bound``, ``memory-bound``, ``overhead-bound`` or ``unknown`` for one stage.

    Measured hardware evidence, where given, decides before the analytic utilizations: a kernel
    timeline with the GPU active < ``GPU_IDLE_ACTIVE_PCT`` % or a CPU/GPU ratio >
    ``CPU_GPU_RATIO`` means overhead-bound; ncu's DRAM bandwidth or tensor-pipe use >= 60% means
    memory- or compute-bound.

    Args:
        mfu, mbu: utilizations against the measured ceilings (0..1, NaN if unknown).
        time_over_floor: measured time / roofline floor time.
        dram_pct: measured DRAM bytes / kernel time as % of the measured copy ceiling (ncu).
        tensor_pct: tensor-pipe active % of peak (ncu, time-weighted).
        gpu_active_pct: kernel-busy % of the window (torch.profiler or nsys timeline).
        cpu_gpu_ratio: host time to issue the window / GPU busy time.
    """
    def ge(v, t):
        return not math.isnan(v) and v >= t

    idle = not math.isnan(gpu_active_pct) and gpu_active_pct < GPU_IDLE_ACTIVE_PCT
    host = not math.isnan(cpu_gpu_ratio) and cpu_gpu_ratio > CPU_GPU_RATIO
    if idle or host:
        return "overhead-bound"
    if ge(dram_pct, 100 * BOUND_FRAC) and not ge(tensor_pct, dram_pct):
        return "memory-bound"
    if ge(tensor_pct, 100 * BOUND_FRAC):
        return "compute-bound"
    if math.isnan(mfu) or math.isnan(mbu):
        return "unknown"
    if mbu >= BOUND_FRAC and mbu >= mfu:
        return "memory-bound"
    if mfu >= BOUND_FRAC:
        return "compute-bound"
    if time_over_floor >= OVERHEAD_FLOOR_RATIO:
        return "overhead-bound"
    return "memory-bound" if mbu >= mfu else "compute-bound"


def diagnose(row: dict) -> dict:
    """Per-stage ``{stage}_bound`` and one ``diagnosis`` text tying the finding to the design.

    Uses the row's analytic/derived columns (``{stage}_mfu_vs_measured``, ``_mbu_vs_measured``,
    ``_roofline_floor_ms``, ``decode_kv_bytes_share``, ``prompt_len``, ``n_kv_heads``, ``kv_dtype``)
    and, where the trial was profiled, ``{stage}_dram_bw_pct_of_measured`` and
    ``_tensor_pipe_pct`` (ncu), ``{stage}_gpu_active_pct`` and ``_cpu_gpu_ratio`` (torch.profiler;
    else ``{stage}_nsys_gpu_active_pct``). ``{stage}_bound_evidence`` names what decided.
    """
    out, texts = {}, []
    times = {st: row.get(TIME[st], math.nan) for st in STAGES}
    nan = math.nan

    def num(k):
        v = row.get(k, nan)
        return float(v) if isinstance(v, (int, float)) and v is not None else nan

    for st, t in times.items():
        floor = row.get(f"{st}_roofline_floor_ms", math.nan)
        ratio = t / floor if floor and not math.isnan(floor) else math.nan
        ev = dict(dram_pct=num(f"{st}_dram_bw_pct_of_measured"),
                  tensor_pct=num(f"{st}_tensor_pipe_pct"),
                  gpu_active_pct=num(f"{st}_gpu_active_pct"),
                  cpu_gpu_ratio=num(f"{st}_cpu_gpu_ratio"))
        if math.isnan(ev["gpu_active_pct"]):
            ev["gpu_active_pct"] = num(f"{st}_nsys_gpu_active_pct")
        b = classify(row.get(f"{st}_mfu_vs_measured", math.nan),
                     row.get(f"{st}_mbu_vs_measured", math.nan), ratio, **ev)
        out[f"{st}_bound"] = b
        out[f"{st}_time_over_floor"] = ratio
        used = [k for k, v in ev.items() if not math.isnan(v)]
        alone = classify(nan, nan, nan, **ev) != "unknown"  # the profile decided, not the ratios
        out[f"{st}_bound_evidence"] = ", ".join(([] if alone else ["mfu", "mbu",
                                                                    "time_over_floor"]) + used)
    kv = row.get("decode_kv_bytes_share", math.nan)
    ctx = row.get("prompt_len", 0) + row.get("new_tokens", 0) // 2
    d = out["decode_bound"]
    if d == "memory-bound" and kv >= 0.3:
        texts.append(f"decode is memory-bound: KV reads are {kv:.0%} of bytes at ~{ctx} context; "
                     f"fewer KV heads (now {row.get('n_kv_heads')}) or a quantized KV cache "
                     f"(now {row.get('kv_dtype')}) would cut them")
    elif d == "memory-bound":
        texts.append(f"decode is memory-bound on weights ({1 - kv:.0%} of bytes): more sequences "
                     "per step amortize them, or smaller/quantized weights cut them")
    elif d == "overhead-bound":
        act = num("decode_gpu_active_pct")
        seen = f" (GPU active {act:.0f}% of the step)" if not math.isnan(act) else ""
        # only what runs where the study ran: CUDA graphs and the Triton kernels need a GPU
        gpu = str(row.get("device", "")).lower() not in ("cpu", "")
        fixes = [f for f, have in (("mode=cudagraph", row.get("mode") == "cudagraph"),
                                   ("kernels=triton", row.get("kernels") == "triton"))
                 if not have and gpu]
        u = [num(f"decode_{x}_vs_measured") for x in ("mbu", "mfu")]
        how = ("using neither ceiling" if not any(v >= BOUND_FRAC for v in u) else  # (NaN: no)
               f"at MBU {u[0]:.2f} and MFU {u[1]:.2f} of the measured ceilings, yet "
               f"overhead-bound by the profile ({out['decode_bound_evidence']})")
        texts.append(f"decode takes {out['decode_time_over_floor']:.1f}x its roofline floor "
                     f"{how}{seen}: kernel launches and small kernels dominate; "
                     + (" and ".join(fixes) + " cut them, and so do" if fixes else
                        "fewer launches cut them:") + " fewer, wider layers")
    elif d == "compute-bound":
        texts.append("decode is compute-bound: large batch; FLOPs per token (width, ffn_dim) set it")
    over = num("decode_dram_bytes_over_min")
    if not math.isnan(over):
        texts.append(f"ncu: the decode step moved {over:.2f}x the analytic minimum DRAM bytes"
                     + (" (extra traffic: activations re-read between unfused kernels)"
                        if over > 1.15 else ""))
    p = out["prefill_bound"]
    if p == "compute-bound":
        texts.append("prefill is compute-bound: matmul FLOPs per token set TTFT")
    elif p != "unknown":
        texts.append(f"prefill is {p} (MFU {row.get(mfu('prefill'), math.nan):.2f}): "
                     "short prompts or a small batch leave the compute units idle")
    out["diagnosis"] = "; ".join(texts)
    return out
