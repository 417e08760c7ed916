"""Derived figures: analytic counts + measured times + hardware peaks -> FLOP/s, MFU, MBU.

Definitions (per stage, prefill or decode):

- achieved FLOP/s = analytic matmul FLOPs of the stage / measured stage time.
- MFU (model FLOPs utilization, Chowdhery et al. 2022, PaLM, App. B) = achieved FLOP/s / peak
  FLOP/s for the model's dtype.
- MBU (model bandwidth utilization, Databricks 2023, "LLM Inference Performance Engineering") =
  (analytic minimum DRAM bytes of the stage / measured time) / peak DRAM bandwidth.

Each is reported against two peaks: ``_vs_datasheet`` (the spec's datasheet figure) and
``_vs_measured`` (the ceiling measured on this device: ``sweep.caches.ceiling_cache``). Where a peak is
unknown the figure is NaN and ``<figure>_reason`` says why. The prefill stage time is TTFT
(prefill plus the first token's sampling); the decode stage time is TPOT.

A mixture-of-experts stage's minimum bytes count the experts its tokens were measured to touch
(``moe_{stage}_experts_touched``, ``sweep.measure.moe_routing``) where the trial measured them,
so MBU means what it means for a dense design; ``{stage}_min_bytes_expected`` keeps the count
under the routing ``zoo.routing`` expects (random weights deep in a model can route most of a
prompt's tokens to a few experts: Qwen3-30B-A3B's shape, batch 1 x 512, max/mean load 15.6).
"""

from __future__ import annotations

import math

from zoo import ModelConfig, counts

from ..common.row import STAGES, TIME
from .hardware import HardwareSpec
from .memory import READ_OVER_COPY


def _ratio(num: float, den: float) -> float:
    return num / den if den and math.isfinite(den) and den > 0 else math.nan


def derived(cfg: ModelConfig, workload: dict, measured: dict, spec: HardwareSpec,
            ceilings: dict) -> dict:
    """The analytic and derived columns of a results row.

    Args:
        cfg: the design.
        workload: ``batch``, ``prompt_len``, ``new_tokens``.
        measured: the child's ``measured`` dict (``ttft_ms``, ``decode_tpot_ms``, ...).
        spec: datasheet peaks.
        ceilings: ``sweep.caches.ceiling_cache.measure_ceilings`` output (or ``{"error": ...}``).

    Returns:
        Flat dict: the ``zoo.counts.summary`` columns, ``prefill_flop_s``, ``decode_flop_s``,
        ``prefill_bytes_s``, ``decode_bytes_s``, ``{stage}_mfu_vs_{datasheet,measured}``,
        ``{stage}_mbu_vs_{datasheet,measured}``, the peaks used, and ``_reason`` columns for NaNs.
    """
    B, T, N = workload["batch"], workload["prompt_len"], workload["new_tokens"]
    row = counts.summary(cfg, B, T, N, workload.get("routing_skew", 0.0))
    for st in STAGES:  # an MoE stage's bytes: the experts its tokens were measured to touch
        got = measured.get(f"moe_{st}_experts_touched", math.nan)
        want = measured.get(f"moe_{st}_experts_touched_expected", math.nan)
        if math.isfinite(got) and math.isfinite(want):
            row[f"{st}_min_bytes_expected"] = was = row[f"{st}_min_bytes"]
            row[f"{st}_min_bytes"] += (got - want) * counts.expert_bytes(cfg)
            row[f"{st}_arith_intensity"] = _ratio(row[f"{st}_flops"], row[f"{st}_min_bytes"])
            if st == "decode":  # the KV bytes over the stage's bytes as measured
                row["decode_kv_bytes_share"] *= _ratio(was, row["decode_min_bytes"])
    peaks = {
        "datasheet": (spec.peak_flops(cfg.dtype), spec.peak_bytes_s),
        "measured": (ceilings.get(f"gemm_flops_{cfg.dtype}", math.nan),
                     ceilings.get("copy_bytes_s", math.nan)),
    }
    row["peak_flops_datasheet"], row["peak_bytes_s_datasheet"] = peaks["datasheet"]
    row["peak_flops_measured"], row["peak_bytes_s_measured"] = peaks["measured"]
    for which, (pf, pb) in peaks.items():  # a peak not stated or not measured: NaN, said why
        for name, v in ((f"peak_flops_{which}", pf), (f"peak_bytes_s_{which}", pb)):
            if not math.isfinite(v):
                row[f"{name}_reason"] = (f"{spec.name} states none" if which == "datasheet" else
                                         f"not measured: {ceilings.get('error', 'no ceiling')}")
    row["hardware_spec"] = spec.name
    times = {st: measured[TIME[st]] / 1e3 for st in STAGES}
    for st, t in times.items():
        row[f"{st}_flop_s"] = row[f"{st}_flops"] / t
        row[f"{st}_bytes_s"] = row[f"{st}_min_bytes"] / t
        for which, (pf, pb) in peaks.items():
            row[f"{st}_mfu_vs_{which}"] = _ratio(row[f"{st}_flop_s"], pf)
            row[f"{st}_mbu_vs_{which}"] = _ratio(row[f"{st}_bytes_s"], pb)
            for fig in (f"{st}_mfu_vs_{which}", f"{st}_mbu_vs_{which}"):
                if math.isnan(row[fig]):
                    row[f"{fig}_reason"] = (
                        f"no {which} peak for {spec.name}"
                        + (f" ({ceilings['error']})" if which == "measured" and "error" in ceilings
                           else ""))
        # the roofline floor: a time below it is a measurement bug, not a fast kernel
        pf, pb = peaks["measured"]
        floor = max(_ratio(row[f"{st}_flops"], pf), _ratio(row[f"{st}_min_bytes"], pb))
        row[f"{st}_roofline_floor_ms"] = 1e3 * floor
        # below it beyond the spread, and beyond what a read-only stream passes the copy rate by
        least = max(_ratio(row[f"{st}_flops"], pf),
                    _ratio(row[f"{st}_min_bytes"], READ_OVER_COPY * pb))
        row[f"{st}_below_floor"] = bool(math.isfinite(least) and t < 0.95 * least)
    return row


# A stage whose slowest repeats (p90) take more than this multiple of its fastest (min) is flagged
# noisy: on an idle GPU the zoo's repeats agree within a few per cent (p90/min <= 1.05 in the H100
# records); 1.5 is far outside that and inside what a busy host does (0.57..16.4 ms seen on a CPU).
NOISY_P90_OVER_MIN = 1.5


def noisy_stages(measured: dict) -> list[str]:
    """Stages whose ``p90 / min`` of the timed repeats exceeds ``NOISY_P90_OVER_MIN``."""
    out = []
    for st, col in TIME.items():
        lo, hi = measured.get(f"{col}_min", math.nan), measured.get(f"{col}_p90", math.nan)
        if lo and math.isfinite(lo) and math.isfinite(hi) and hi / lo > NOISY_P90_OVER_MIN:
            out.append(st)
    return out


def physical_limit_errors(row: dict) -> list[str]:
    """Figures of a row beyond what the hardware can do: a measurement error, not a result.

    A decode step faster than its roofline floor (``decode_below_floor``: its bytes at
    ``memory.READ_OVER_COPY`` x the copy rate), an MBU above 1 against the datasheet's DRAM
    bandwidth (2% allowed for the spec's rounding) or above ``READ_OVER_COPY`` times the measured
    copy ceiling (a stage that only reads streams faster than a copy, which reads and writes: an
    MoE prefill at batch 1 on the H100 read at 1.08x the copy rate, 0.95x the datasheet's), or a
    rate that is zero or not finite. The prefill FLOP floor is not used: it counts the whole
    ``T x T`` score matrix, which a causal kernel halves (``zoo.counts``).
    """
    out = []
    for st in STAGES:
        rate = row.get(f"{st}_tok_s", math.nan)
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            out.append(f"{st}_tok_s = {rate} (no time measured)")
        sheet = row.get(f"{st}_mbu_vs_datasheet", math.nan)
        mbu = row.get(f"{st}_mbu_vs_measured", math.nan)
        if math.isfinite(sheet) and sheet > 1.02:
            out.append(f"{st} MBU {sheet:.2f} > 1 against the datasheet's DRAM bandwidth")
        elif math.isfinite(mbu) and mbu > READ_OVER_COPY:  # a wrong spec does not hide it
            out.append(f"{st} MBU {mbu:.2f} > {READ_OVER_COPY} against the measured copy ceiling")
    if row.get("decode_below_floor"):
        out.append(f"decode TPOT {row[TIME['decode']]:.4g} ms is below its roofline floor "
                   f"{row['decode_roofline_floor_ms']:.4g} ms")
    return out
