"""A design predicted on a hardware target: the figures a designer compares across chips.

``predict_on(cfg, workload, spec, calibration)`` prices one design on one hardware spec
(``conf/hardware/*.yaml``) with the best basis there is, and says which (``prediction_basis``):

1. ``calibrated``: the calibration was measured on this very device (``spec.match`` names it).
2. ``transferred``: an NVIDIA target and a calibration of another NVIDIA GPU: the calibration's
   terms scaled by the ratio of the source's measured ceilings to the target's datasheet peaks
   times its stated achievable fractions (``predict.transfer``).
3. ``fitted``: no calibration applies and the spec has a ``fitted`` block (``python -m
   sweep.cli.whatif --fit-public``: its engine family fitted on public measurements,
   ``sweep.analysis.public``): per-layer cost + bytes / (bandwidth x fraction) for decode,
   FLOPs / (peak x fraction) for prefill, with the fit's leave-one-chip-out error band as the
   interval (``{stage}_pred_ms_lo`` / ``_hi``).
4. ``roofline``: no calibration or fit applies (another vendor, a CPU, an NPU): per kernel
   ``max(FLOPs / (peak x compute_efficiency), bytes / (bandwidth x bandwidth_efficiency))`` plus
   ``launch_us`` per kernel, the spec's stated assumptions (``HardwareSpec.assumptions``).

Figures (the results-row names a measured study has, so fronts compare): ``ttft_ms``,
``decode_tpot_ms`` (also as ``{stage}_pred_ms``), ``decode_tok_s`` (batch / TPOT),
``prefill_tok_s``, ``decode_j_per_token`` (TDP x TPOT / batch: an upper bound at the board's
power limit; NaN where no TDP is stated),
``fits_memory`` (weights, KV cache and activations within ``usable_bytes``; NaN, with
``fits_memory_reason``, where the spec states no memory size), ``decode_bound``
(``compute-bound``/``memory-bound``/``overhead-bound``, as a measured row says it: the largest of
the roofline's terms), ``prediction_basis``.
"""

from __future__ import annotations

import json
import math
import re

from kernels.switches import Switches
from zoo import ModelConfig, counts
from zoo.config import DESIGN_FIELDS

from ..common.row import MODULES, RATE, STAGES, TIME, energy, pred, pred_module
from .anchors import transfer
from .memory import MEMORY_RESERVE, MEMORY_SHARE, usable
from .predict import ROUTED, STAND_INS, confidence, kernel_list, predict
from .pricing import Calibrated

BASES = ("calibrated", "transferred", "fitted", "roofline")


def _peak(spec, dtype: str) -> float:
    """Peak FLOP/s of ``spec`` for ``dtype``; an NPU without bf16 runs it at its fp16 rate."""
    p = spec.peak_flops(dtype)
    if not math.isfinite(p) and dtype == "bf16":
        p = spec.peak_flops("fp16")
    return p


def spec_notes(spec, cfg: ModelConfig) -> list[str]:
    """What a target's price rests on beyond its datasheet, said in ``prediction_notes``: bf16
    priced at the fp16 peak where the spec states none (``_peak``); an fp8 cache or fp8 weights
    on a target that states no fp8 (``peak_tflops.fp8``: an A100, Apple's GPUs, a Snapdragon),
    priced as a byte format widened in software there (the zoo's own fp8 kernels need compute
    capability >= 8.9); and the spec's figures that are estimates, not vendor figures
    (``HardwareSpec.estimates``)."""
    out = []
    if cfg.dtype == "bf16" and not math.isfinite(spec.peak_flops("bf16")):
        out.append(f"{spec.name} states no bf16 peak: bf16 priced at its fp16 peak")
    for name, fmt in (("kv_dtype", cfg.kv_dtype), ("weight_dtype", cfg.weight_dtype)):
        if fmt.startswith("fp8") and not math.isfinite(spec.peak_flops("fp8")):
            out.append(f"{name}={fmt} on {spec.name}, which states no fp8: priced as one byte a "
                       "value widened in software (no fp8 hardware there)")
    if spec.estimates:
        out.append(f"{spec.name}'s {', '.join(spec.estimates)} are estimates, not vendor "
                   "figures (its source says how they were derived)")
    return out


def target_ceilings(spec, dtype: str) -> dict:
    """What the target achieves by its stated assumptions: ``gemm_flops_<dtype>`` (FLOP/s) and
    ``copy_bytes_s`` (bytes/s) = datasheet peaks x ``compute_efficiency`` /
    ``bandwidth_efficiency``.

    Raises:
        ValueError: the spec has no peak for ``dtype`` or no bandwidth (names the field).
    """
    a = spec.assumptions or {}
    pf, pb = _peak(spec, dtype), spec.peak_bytes_s
    if not math.isfinite(pf):
        raise ValueError(f"{spec.name}: peak_tflops.{dtype} is not stated")
    if not math.isfinite(pb):
        raise ValueError(f"{spec.name}: hbm_gb_s is not stated")
    return {f"gemm_flops_{dtype}": pf * a.get("compute_efficiency", 1.0),
            "copy_bytes_s": pb * a.get("bandwidth_efficiency", 1.0), "device": spec.name}


def _is_device(spec, device_name: str | None) -> bool:
    return bool(device_name) and any(re.search(p, device_name) for p in spec.match)


def from_gpu(meta: dict) -> bool:
    """Whether a calibration (its ``meta``) was measured on a GPU, with the GEMM ceilings a
    transfer scales by: a CPU's calibration times the CPU's kernels (its ceilings hold a bf16
    GEMM too), never a GPU's."""
    ceil = (meta or {}).get("ceilings") or {}
    return (meta or {}).get("device") not in (None, "", "cpu") and any(
        k in ceil for k in ("gemm_flops_bf16", "gemm_flops_fp16"))


def calibration_for(spec, calibration: Calibrated | None, dtype: str
                    ) -> tuple[Calibrated | None, str | None]:
    """``(calibration, how)`` a target ``spec`` is priced from (``predict_on``'s rule): the
    calibration itself on its own device (``"calibrated"``), transferred to another NVIDIA GPU
    by the datasheet peaks when it holds its measured ceilings (``"transferred"``), else
    ``(None, None)``: the target's fitted or roofline prices."""
    src = (calibration.meta if calibration is not None else {}) or {}
    if calibration is not None and _is_device(spec, src.get("device")):
        return calibration, "calibrated"
    if (calibration is not None and spec.vendor == "NVIDIA" and spec.kind == "gpu"
            and from_gpu(src)):
        ceil = target_ceilings(spec, dtype)
        return transfer(calibration, src["ceilings"], ceil, dtype), "transferred"
    return None, None


def predict_on(cfg: ModelConfig, workload: dict, spec, calibration: Calibrated | None = None,
               mode: str = "cudagraph", analytic: dict | None = None,
               switches: Switches | None = None, routing: dict | None = None) -> dict:
    """One design on one target: the row figures above (times in ms, rates in tokens/s, J).

    Args:
        cfg: the design; workload: ``batch``, ``prompt_len``, ``new_tokens``; spec: the target's
            ``HardwareSpec``; calibration: a calibration of some NVIDIA GPU (its ``meta`` names the
            device and its measured ceilings), or None; mode: decode mode where calibrated;
            analytic: ``zoo.counts.summary`` of the design and workload, when the caller has it;
            switches: the ``kernels.switches.Switches`` the design runs under (default: the
            defaults); routing: a measured row's MoE routing (``predict``'s ``routing``: the
            same weights route alike on any chip), priced on calibrated, transferred and
            roofline bases (a public fit prices the workload's expected routing).

    Raises:
        ValueError: the spec lacks a peak the design needs (see ``target_ceilings``).
    """
    B, T, N = workload["batch"], workload["prompt_len"], workload["new_tokens"]
    ceil = target_ceilings(spec, cfg.dtype)
    src = (calibration.meta if calibration is not None else {}) or {}
    cal, how = calibration_for(spec, calibration, cfg.dtype)
    if how == "calibrated":
        basis = f"calibrated on {src.get('device')}"
        row = predict(cfg, workload, spec, cal, mode=mode, switches=switches, routing=routing)
    elif how == "transferred":
        basis = (f"transferred from {src.get('device')} ({src.get('date', '')[:10]}) by "
                 f"{spec.name}'s datasheet peaks x stated efficiencies")
        row = predict(cfg, workload, spec, cal, mode=mode, switches=switches, routing=routing)
    elif spec.fitted.get("decode"):
        row = _fitted(cfg, workload, spec, ceil)
        basis = f"fitted on public measurements, {spec.name}: {spec.fitted.get('basis', '')}"
        if bare := [st for st in STAGES if not spec.fitted.get(st)]:  # said in the basis too
            basis += (f"; {' and '.join(bare)}: the roofline x stated efficiencies (no public "
                      "measurements of it fitted)")
    else:
        row = predict(cfg, workload, spec, None, ceilings=ceil, switches=switches,
                      routing=routing)
        launch = spec.assumptions.get("launch_us", 0.0) * 1e-3  # ms
        fold = (switches or Switches()).rope_in_attention
        for stage, (new, ctx) in (("prefill", (T, T)),
                                  ("decode", (1, counts.mean_decode_context(T, N)))):
            n = sum(k.repeat * k.launches
                    for k in kernel_list(cfg, B, new, ctx, cfg.kernels, fold))
            row[pred_module(stage, "launch_overhead")] = n * launch
            row[pred(stage)] = row[pred(stage, "roofline")] + n * launch
        basis = (f"roofline x stated efficiencies of {spec.name} "
                 f"(compute {spec.assumptions.get('compute_efficiency', 1.0)}, bandwidth "
                 f"{spec.assumptions.get('bandwidth_efficiency', 1.0)}, launch "
                 f"{spec.assumptions.get('launch_us', 0.0)} us)")
    kind = basis.split(" ")[0]
    if STAND_INS in row.get("prediction_basis", ""):  # (calibrated or transferred)
        basis += STAND_INS
    if (at := row.get("prediction_basis", "").find(ROUTED)) >= 0:  # a measured MoE routing
        basis += row["prediction_basis"][at:]
    ttft, tpot = row[pred("prefill")], row[pred("decode")]
    skew = workload.get("routing_skew", 0.0)
    s = analytic or counts.summary(cfg, B, T, N, skew)
    need = s["memory_need_bytes"]  # weights, KV cache, prefill activations (zoo.counts)
    mods = {m: row.get(pred_module("decode", m), 0.0) for m in MODULES}
    dc = counts.decode_mean(cfg, B, T, N, skew)
    t_mem = dc.min_bytes / ceil["copy_bytes_s"] * 1e3
    t_flop = dc.matmul_flops / ceil[f"gemm_flops_{cfg.dtype}"] * 1e3
    bound = max((("memory", t_mem), ("compute", t_flop),
                 ("overhead", mods["launch_overhead"])), key=lambda x: x[1])[0]
    told = tpot is not None and math.isfinite(tpot)  # a decode priced (not: mode=compile's)
    top = row.get(pred("decode", "hi"), math.nan)  # the interval's top: the bound's time
    top = top if top is not None and math.isfinite(top) else tpot
    out = {"target": spec.name, "target_vendor": spec.vendor, "target_kind": spec.kind,
           TIME["prefill"]: ttft, TIME["decode"]: tpot,  # a predicted row's figures (row.pred)
           RATE["decode"]: B / tpot * 1e3 if tpot and math.isfinite(tpot) else math.nan,
           RATE["prefill"]: B * T / ttft * 1e3 if ttft else math.nan,
           energy("decode"): (spec.tdp_w * top * 1e-3 / B if math.isfinite(spec.tdp_w) and told
                              else math.nan),
           "memory_needed_bytes": need,
           "fits_memory": fits_memory(need, spec),
           "decode_bound": f"{bound}-bound" if told else "", "prediction_basis": basis,
           "basis_kind": kind,
           "prediction_notes": "; ".join(filter(None, [row.get("prediction_notes", ""),
                                                      *spec_notes(spec, cfg)])),
           "prediction_stale": row.get("prediction_stale", False),
           # from the stages' intervals (calibrated, transferred, fitted); stated efficiencies: low
           "prediction_confidence": row.get("prediction_confidence") or confidence(row, kind=None)}
    if not math.isfinite(spec.memory_gb):
        out["fits_memory_reason"] = f"{spec.name}: no memory size stated (hardware.memory_gb)"
    if not told:  # why, as the stage's prediction says it (predict.py's reason)
        why = row.get("decode_pred_reason") or "the decode stage is not priced"
        for k in (TIME["decode"], RATE["decode"], energy("decode"), "decode_bound"):
            out[k + "_reason"] = why
    elif not math.isfinite(spec.tdp_w):
        out[energy("decode") + "_reason"] = f"{spec.name}: no TDP stated"
    else:  # said beside the figure: not a measurement, the most the board can draw
        out[energy("decode") + "_basis"] = (f"upper bound: {spec.name}'s TDP {spec.tdp_w:g} W x "
                                            "TPOT (its interval's top) / batch (the board at its "
                                            "power limit)")
    out.update({k: v for k, v in row.items() if k.startswith(("prefill_pred_", "decode_pred_"))})
    return out


def fitted_step(f: dict, stage: str, cfg, st, bandwidth: float, peak: float) -> float:
    """The step time (s) a spec's fitted block ``f`` (``stage`` of ``--fit-public``) prices a
    design's stage counts ``st`` (``zoo.counts.StageCounts``) at: ``n_layers x per_layer_s``
    plus, for decode, ``min_bytes / (bandwidth x fraction)`` and, for weights under 16 bits,
    ``dequant_bytes_per_weight`` bytes per weight at the bandwidth; for prefill
    ``matmul_flops / (peak x fraction)``. ``bandwidth`` in bytes/s, ``peak`` in FLOP/s."""
    t = cfg.n_layers * f["per_layer_s"]
    if stage == "decode":
        t += st.min_bytes / (bandwidth * f["fraction"])
        if cfg.weight_bits < 16:
            p = counts.params(cfg)
            t += (p.non_embedding + p.lm_head) * f["dequant_bytes_per_weight"] / bandwidth
        return t
    return t + st.matmul_flops / (peak * f["fraction"])


def _fitted(cfg: ModelConfig, workload: dict, spec, ceil: dict) -> dict:
    """The ``predict`` row of a design priced by the spec's ``fitted`` block: each stage's
    time from ``fitted_step`` (its modules the roofline's shares of it, the fixed part
    as ``launch_overhead``) and its interval ``[t / (1 + w), t x (1 + w)]``, re-centred on it,
    ``w`` the fit's leave-one-chip-out half-width (``loo_half_width_pct``; a stage without a
    fit keeps the roofline x stated efficiencies, said in ``prediction_notes``); its low end
    never under the datasheet roofline (peak FLOP/s and bandwidth at full use), nor its point."""
    B, T, N = workload["batch"], workload["prompt_len"], workload["new_tokens"]
    row = predict(cfg, workload, spec, None, ceilings=ceil)
    skew = workload.get("routing_skew", 0.0)
    for stage, st in (("prefill", counts.prefill(cfg, B, T, skew)),
                      ("decode", counts.decode_mean(cfg, B, T, N, skew))):
        f = spec.fitted.get(stage)
        if not f:  # said: the row's basis is the other stage's fit
            row["prediction_notes"] = "; ".join(filter(None, [
                row.get("prediction_notes"), f"{stage}: no public {stage} measurements fitted "
                f"for {spec.name}: the roofline x its stated efficiencies, no interval"]))
            row[f"{stage}_pred_basis"] = f"roofline x {spec.name}'s stated efficiencies"
            continue
        row[f"{stage}_pred_basis"] = f"fitted on public {stage} measurements"
        peak = _peak(spec, cfg.dtype)
        t = fitted_step(f, stage, cfg, st, spec.peak_bytes_s, peak) * 1e3
        # never under the datasheet's roofline: its peak FLOP/s and bandwidth at full use (NaN:
        # a peak not stated)
        floor = max(st.matmul_flops / peak, st.min_bytes / spec.peak_bytes_s) * 1e3
        t = max(t, floor)
        fixed = cfg.n_layers * f["per_layer_s"] * 1e3
        mods = {m: row.get(pred_module(stage, m), 0.0) for m in MODULES}
        rest = sum(v for m, v in mods.items() if m != "launch_overhead") or 1.0
        for m, v in mods.items():
            row[pred_module(stage, m)] = fixed if m == "launch_overhead" else v / rest * (t - fixed)
        row[pred(stage)] = t
        w = f.get("loo_half_width_pct")
        w = 1 + w / 100 if w is not None else math.nan
        # re-centred on the point: [t / (1 + w), t x (1 + w)] held 80% of the published figures
        # of the fit's rows, each priced without its chip (sweep.analysis.public_loo.COVERAGE)
        row[pred(stage, "lo")], row[pred(stage, "hi")] = max(t / w, floor), t * w
    return row




def config_of(row) -> ModelConfig:
    """The design of a results row (its design columns, ``model`` the preset name).

    Raises:
        KeyError: the row lacks a design column; ``zoo.DesignError``: an invalid design.
    """
    import dataclasses
    import json

    names = {f.name for f in dataclasses.fields(ModelConfig)}
    # an integer field a table stored as float (a column with NaN where it is unset: pandas)
    ints = {f.name for f in dataclasses.fields(ModelConfig)
            if "int" in str(f.type) and "float" not in str(f.type)}
    d = {k: (v.item() if hasattr(v, "item") else v) for k, v in dict(row).items()
         if k in names and k not in ("name", "extra")}
    d = {k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v
         for k, v in d.items()}
    missing = [k for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim")
               if k not in d]
    if missing:
        raise KeyError(f"row has no design column(s) {', '.join(missing)}")
    rs = d.get("rope_scaling")
    d["rope_scaling"] = json.loads(rs) if isinstance(rs, str) and rs else None
    d["name"] = str(row.get("model", "design"))
    return ModelConfig.from_dict({k: v for k, v in d.items()
                                  if not (isinstance(v, float) and math.isnan(v))})


def switches_of(row) -> Switches:
    """The kernel switches a results row ran (or was priced) under: its ``switch_<name>``
    columns; a row written before they were recorded, the defaults.

    Raises:
        ValueError: a switch column that is not a boolean (named).
    """
    d = {k[len("switch_"):]: v for k, v in dict(row).items()
         if k.startswith("switch_") and not (isinstance(v, float) and math.isnan(v))}
    d = {k: v.item() if hasattr(v, "item") else v for k, v in d.items()}
    return Switches.from_dict({k: {"true": True, "false": False}.get(v.lower(), v)
                               if isinstance(v, str) else v for k, v in d.items()})


def predict_designs(items, spec, calibration: Calibrated | None = None,
                    constraints: dict | None = None) -> list[dict]:
    """``predict_on`` for each of ``items`` (``(ModelConfig, workload, mode)``), with the design
    and workload columns, ``predicted=True`` and the constraint bands applied (a design outside
    one: ``state`` PRUNED, the reason and ``pruned_by``, the constraints' names joined by
    commas; one the spec cannot price: FAIL and the reason; one
    that does not fit the spec's memory, ``fits_memory`` False: PRUNED, its figures kept)."""
    rows = []
    for cfg, wl, mode in items:
        B, T, N = wl["batch"], wl["prompt_len"], wl["new_tokens"]
        analytic = counts.summary(cfg, B, T, N, wl.get("routing_skew", 0.0))
        row = {k: getattr(cfg, k) for k in DESIGN_FIELDS}
        row["rope_scaling"] = json.dumps(cfg.rope_scaling) if cfg.rope_scaling else ""  # as measured rows
        row.update(model=cfg.name, batch=B, prompt_len=T, new_tokens=N, mode=mode,
                   routing_skew=wl.get("routing_skew", 0.0), routing=wl.get("routing", "router"),
                   predicted=True, **{k: analytic[k] for k in (
                       "params_non_embedding", "params_total", "params_active",
                       "kv_bytes_per_token", "kv_cache_bytes")})
        if broken := counts.violations(constraints or {}, analytic):
            rows.append(dict(row, state="PRUNED", pruned_by=",".join(broken),
                             fail_reason="pruned: " + "; ".join(broken.values())))
            continue
        try:
            row.update(predict_on(cfg, wl, spec, calibration, mode, analytic), state="COMPLETE")
        except (KeyError, ValueError) as e:
            row.update(state="FAIL", fail_reason=f"cannot predict: {e}")
        if why := misfit(row, spec):  # as a measured space prunes a design that cannot fit
            row.update(state="PRUNED", fail_reason=why)
        rows.append(row)
    return rows


def misfit(p: dict, spec) -> str | None:
    """Why a design predicted on ``spec`` is PRUNED (``p``: ``predict_on``'s figures): it does
    not fit the spec's memory (``fits_memory`` False), its predicted figures kept; else None."""
    if p.get("fits_memory") is not False:
        return None
    return (f"does not fit: needs {p['memory_needed_bytes'] / 2**30:.1f} GiB (weights, KV cache, "
            f"activations) of the {spec.name}'s {spec.memory_gb:g} GiB, "
            f"{usable_bytes(spec) / 2**30:.1f} GiB usable ({MEMORY_SHARE:.0%} less "
            f"{MEMORY_RESERVE / 2**30:.0f} GiB, as a measured study allows; predicted figures kept)")


def usable_bytes(spec) -> float:
    """Bytes of ``spec``'s memory a run may hold (``sweep.analysis.memory.usable``), the bound a
    measured study's designs are held to; ``memory_gb`` read as GiB (``HardwareSpec``: a
    measured study's bound starts from NVML's total, 79.6 GiB on an "80 GB" H100)."""
    return usable(spec.memory_gb * 2**30)


def fits_memory(need: float, spec) -> bool | float:
    """Whether ``need`` bytes (weights, KV cache, activations) fit ``spec``'s ``usable_bytes``;
    NaN where the spec states no memory size (unknown, never a reason to prune)."""
    return bool(need <= usable_bytes(spec)) if math.isfinite(spec.memory_gb) else math.nan
