"""The performance model: a design's prefill and decode time predicted per module kind.

``predict(cfg, workload, hardware, calibration=None, kernels=..., mode=...)`` walks the kernels
the zoo launches for one prefill and one decode step (``kernel_list``) and prices each two ways:

- ``roofline``: ``max(FLOPs / peak FLOP/s, bytes / bandwidth)`` per kernel (Williams et al. 2009)
  against the measured ceilings where given, else the datasheet: what analytic tools (LLM-Viewer
  and the like) do. Launch overhead is not priced.
- ``calibrated``: each kernel's time from this device's micro-benchmarks (``sweep.analysis.
  calibrate``): GEMMs interpolated in log M between the calibrated M of the same ``(N, K)`` (or
  scaled from the nearest calibrated ``(N, K)`` by its achieved FLOP/s), decode attention and the
  elementwise kernels from a linear fit ``time = fixed + bytes / bandwidth`` per implementation,
  prefill attention from the achieved FLOP/s at the nearest sequence length and head_dim; plus
  the launch cost: per kernel inside a CUDA graph, or per op on the host in eager mode (the stage
  then takes the larger of the GPU's and the host's time).

Module kinds (``MODULES``): ``qkv``, ``attention``, ``out_proj``, ``ffn``, ``lm_head``,
``norms_elementwise`` (norms, RoPE, SwiGLU, KV write), ``launch_overhead`` (the idle time between
kernels, ``graph_gap`` per launch, and the host's excess over the GPU in eager mode). Every term names the
calibration entry it came from (``basis``); a term outside the calibrated range says so in
``notes`` (never a silent extrapolation). Times in seconds; FLOPs and bytes as in ``zoo.counts``.

A calibration from another device is transferred by the ratio of the two devices' measured (or
datasheet) ceilings: compute-bound entries by the GEMM ceiling, memory-bound ones by the copy
bandwidth, fixed costs unchanged (``sweep.analysis.anchors.transfer``).
"""

from __future__ import annotations

import math

from kernels import decode_attention
from kernels.switches import Switches
from zoo import ModelConfig, attn, ffn
from zoo.config import LATER_FIELDS
from zoo.counts import mean_decode_context
from zoo.generate import PREFILL_GRAPH_MAX_TOKENS
from zoo.launches import NORM_LAUNCHES, Kernel, Stage

from ..common.row import MODULES, STAGES, TIME, error, pred, pred_module
from .power import (
    DEFAULT_REPEATS,
    DEFAULT_WARMUP,
    POWER_UNCERTAINTY,
    power_limit,
    slowdown_at,
    sustained_fraction,
)
from .pricing import Calibrated, stand_in

STEP_EAGER_OPS = 2  # per decode step beside the graph: token copy, position fill (the logits'
# clone and argmax are the ``sample`` kernel)
# The interval of a prediction (``{stage}_pred_ms_lo`` .. ``_hi``): each kernel's own uncertainty
# (``pricing.Calibrated.uncertainty``: its micro-benchmark's spread, its distance from the
# calibrated shapes, a transfer), added in quadrature over kernels (a kernel's layers together),
# an eager stage's host cost (further above than below), and a floor for how a whole measurement
# varies run to run. The widths are tuned on the development set
# (conf/validation/development.yaml), never on the held-out one.
# said in a calibrated row's prediction_basis where a kernel is priced by another's entry
STAND_INS = "; some kernels priced by stand-ins (prediction_notes)"
ROUTED = "; MoE layers on the routing the trial measured"  # (its columns follow: predict)
EAGER_HOST_UNCERTAINTY = 0.4  # the host's eager cost varies run to run: the development set's
# eager rows -22 .. -60% (one design measured 18.2 and 9.3 ms per step on two H100s)
# ... and from machine to machine, mostly slower than the host the fixed costs were measured on:
# the development set's eager steps measured 1.28-2.50x their price on the shipped costs (7 rows
# on four H100 and H200 machines, results/reference/dev_h100/{v2,v3,2026-12-07-s35}, dev_h200),
# so a host-bound stage's interval reaches 1.5 x the host's time above it (0.4 below)
EAGER_HOST_SLOWER = 1.5
# how far a whole stage's measurement strays from the sum of its kernels, tuned on the development
# rows (conf/validation/development.yaml, results/reference/dev_h100/v3 and dev_h200, and the main
# job's designs, fresh_h100/trials_power.csv): with the power limit and the sampling priced,
# graphed prefills within 6.1% and decode steps within 4.8% but for the 2-layer design (-12%)
MEASUREMENT_FLOOR = {"prefill": 0.07, "decode": 0.04}
CONFIDENCE = ((0.06, "high"), (0.15, "medium"))  # half-width / prediction, else "low"


def confidence(row: dict, kind: str = "calibrated") -> str:
    """``high`` / ``medium`` / ``low`` by the widest stage interval of ``row`` relative to its
    ``kind`` prediction (``CONFIDENCE``); a row with no interval, or a priced stage without one
    (a public fit's stage priced by the bare roofline): ``low``."""
    widths = []
    for s in STAGES:
        p, hi, lo = row.get(pred(s, kind)), row.get(pred(s, "hi")), row.get(pred(s, "lo"))
        if not p or not math.isfinite(p):
            continue  # the stage is not priced (said by its own reason)
        ok = hi is not None and lo is not None and math.isfinite(hi) and math.isfinite(lo)
        widths.append((hi - lo) / 2 / p if ok else math.inf)
    worst = max(widths) if widths else math.inf
    return next((w for lim, w in CONFIDENCE if worst <= lim), "low")


def kernel_list(cfg: ModelConfig, batch: int, new: int, context: int, kernels: str,
                fold: bool = True, skew: float = 0.0, draw: bool = False,
                touched: float = math.nan) -> list[Kernel]:
    """The kernels of one forward of ``new`` tokens per sequence over ``context`` positions
    (prefill: ``new == context``; a decode step: ``new == 1``), in the zoo's order. ``fold``
    (``switches.rope_in_attention``, as the model reads it) folds a Triton decode step's RoPE and
    cache write into its attention kernel. A Triton decode step of at most
    ``kernels.gemv.MAX_M`` sequences runs its linear layers as ``gemv`` kernels (the norm or
    activation in their prologue: ``kernels.decode_linear``); the attention's and the FFN's
    kernels are their kinds' (``zoo.attn``, ``zoo.ffn``). ``skew``, ``draw``: the workload's
    ``routing_skew`` and ``routing=uniform``; ``touched``: the experts an MoE layer reached as a
    trial measured them (NaN: expected under that routing; ``zoo.launches.Stage``)."""
    st = Stage(cfg, batch, new, context, kernels, skew, draw, touched)
    d, V, wb, M, fused = cfg.d_model, cfg.vocab_size, st.wb, st.M, st.fused
    norm_bytes = (4 if fused else 2) * M * d * wb  # fused: residual read and written too
    nl = None if cfg.norm == "rmsnorm" else NORM_LAUNCHES[cfg.norm]  # (priced as RMSNorm)
    # the torch path also gathers its positions' RoPE rows (cos, sin) once per forward, and a
    # decode step as its graph runs it builds the position mask: launches of their own (counted
    # with the embedding's gather; their few bytes priced there)
    gathers = 1 + (0 if fused else 2 + (new == 1))
    out = [st.elem("embedding", 2 * M * d * wb, rep=1, launches=gathers, impl="torch")]
    out += [st.elem("rmsnorm", norm_bytes, launches=nl, in_prologue=True),
            *(k for w, n in attn.windows(cfg)  # layers grouped by the window they attend over
              for k in attn.kind(cfg).kernels(st, fold, decode_attention.launches, n, w)),
            st.elem("rmsnorm", norm_bytes, launches=nl, in_prologue=True),
            *(k for kind, n in ffn.groups(cfg) for k in kind.kernels(st, rep=n))]
    if cfg.sandwich_norm:  # Gemma's norms after the attention and the FFN (torch path)
        out.append(st.elem("rmsnorm", 2 * norm_bytes, launches=2 * NORM_LAUNCHES[cfg.norm]))
    if not fused:
        out.append(st.elem("residual", 2 * 3 * M * d * wb, launches=2))
    out += [st.elem("rmsnorm", 2 * batch * d * wb, rep=1, launches=nl, in_prologue=True),
            st.gemm("lm_head", "output", V, d, m=batch, rep=1, prologue="norm+res"),
            # greedy sampling: a decode step's argmax inside its graph (zoo.generate's
            # decode_greedy; kernels.argmax on the Triton path; compile mode, which samples its
            # step's clone, priced the same), a prefill's last-position logits [batch, vocab]
            # cloned out of its graph and sampled by torch
            st.elem("argmax", batch * V * wb, rep=1, launches=1) if new == 1 else
            st.elem("sample", 3 * batch * V * wb, rep=1, launches=2, impl="torch")]
    return [k for k in out if k is not None]


# ---- pricing -------------------------------------------------------------------------------

def roofline_time(k: Kernel, peak_flops: float, peak_bytes_s: float) -> float:
    """``max(FLOPs / peak, bytes / bandwidth)`` of one kernel (s)."""
    return max(k.flops / peak_flops if peak_flops else 0.0, k.bytes / peak_bytes_s)


def graphed(mode: str, batch: int, new: int, prefill: bool | None = None) -> bool:
    """Whether ``zoo.generate`` replays this stage as a CUDA graph: ``cudagraph`` mode graphs the
    decode step and a prefill of at most ``PREFILL_GRAPH_MAX_TOKENS`` tokens (``batch * new``);
    ``compile`` graphs the decode step, its prefill runs eagerly. ``prefill`` defaults to
    ``new > 1`` (a one-token prompt's prefill must say so)."""
    if not (new > 1 if prefill is None else prefill):
        return mode in ("cudagraph", "compile")
    return mode == "cudagraph" and batch * new <= PREFILL_GRAPH_MAX_TOKENS


def _stage(cfg, batch, new, context, kernels, mode, cal, peaks, fold=True,
           stage: str = "decode", power: tuple | None = None, skew: float = 0.0,
           draw: bool = False, touched: float = math.nan) -> dict:
    """Predicted times (s) of one stage: per module kind for both kinds, with bases and notes.
    ``power``: ``(profile, onset s, runs before the timed one, steps per run)`` of the power
    limit (``power_limit``), applied to the compute-bound kernels (GEMMs, the grouped MoE ones
    among them, at or past the ridge; prefill attention) at the slow-down of the stage's duty
    (``slowdown_at``): its compute-bound FLOPs over the measured GEMM ceiling times its time,
    as the ceilings' mixed runs define it (a GEMM at its ceiling for that share of the time)."""
    ks = kernel_list(cfg, batch, new, context, kernels, fold, skew, draw, touched)
    roof = dict.fromkeys(MODULES, 0.0)
    calib = dict.fromkeys(MODULES, 0.0)
    hot = dict.fromkeys(MODULES, 0.0)  # compute-bound kernels' calibrated time
    hot_flop = 0.0  # and their FLOPs
    ridge = peaks[0] / peaks[1]  # FLOP/byte
    basis = {}
    spread2 = 0.0  # the stage's uncertainty (s^2): a kernel's terms add up over its layers
    host_lo = host_hi = 0.0  # a host-bound eager stage's own, below and above (s)
    for k in ks:
        roof[k.module] += k.repeat * roofline_time(k, *peaks)
        if cal is not None:
            seen = len(cal.notes)
            t, b = cal.price(k)
            calib[k.module] += k.repeat * t
            if k.kind == "prefill_attn" or (k.kind == "gemm" and k.flops >= ridge * k.bytes):
                hot[k.module] += k.repeat * t
                hot_flop += k.repeat * k.flops
            basis.setdefault(k.module, set()).add(b)
            spread2 += (k.repeat * t * cal.uncertainty(b, noted=len(cal.notes) > seen)) ** 2
    out = {"roofline": roof, "roofline_total": sum(roof.values())}
    if cal is None:
        return out
    launches = sum(k.repeat * k.launches for k in ks)
    if power is not None and sum(hot.values()) > 0:
        profile, onset, runs_before, steps = power
        run_s = steps * sum(calib.values())
        phi = sustained_fraction(run_s, runs_before * run_s, onset)
        # the power a stage draws follows its tensor-core work: its duty is its FLOP rate over the
        # measured GEMM ceiling's (the mixed runs': the GEMM at its ceiling for that share)
        duty = min(hot_flop / (peaks[0] * sum(calib.values())), 1.0)  # (peaks[0]: the
        # design dtype's GEMM ceiling; another machine's calibration can read a little over 1)
        ratio = slowdown_at(profile, duty)
        if phi > 0 and ratio > 1:
            for m in MODULES:
                calib[m] += hot[m] * (ratio - 1) * phi
            added = sum(hot.values()) * (ratio - 1) * phi
            spread2 += (POWER_UNCERTAINTY * added) ** 2
            basis.setdefault("power_limit", set()).add(
                f"compute-bound kernels (duty {duty:.2f}: their FLOPs at the GEMM ceiling over "
                f"the stage's time) x{ratio:.3f} for "
                f"{100 * phi:.0f}% of the run (power limit past {1e3 * onset:.0f} ms of load: "
                "measured sustained GEMM at that duty)")
    gpu = sum(calib.values())
    # every calibrated time holds one inter-kernel gap per launch (timed back to back in a
    # graph): booked as launch overhead, so each module's time is its kernels' own
    try:
        gap = cal.launch("graph_gap")
    except KeyError:  # an older calibration: the gaps stay in the modules
        gap = 0.0
    gaps = 0.0
    for m in MODULES:
        g = min(gap * sum(k.repeat * k.launches for k in ks if k.module == m), 0.95 * calib[m])
        calib[m] -= g
        gaps += g
    if graphed(mode, batch, new, prefill=new == context):
        # the gaps, and the step's small kernels around the replay (their host cost overlaps
        # the GPU's work); a decode step is never shorter than the host's floor under a
        # graphed step (``graph_step_<impl>``: a model with negligible GPU work, timed)
        calib["launch_overhead"] = gaps + STEP_EAGER_OPS * cal.launch("graph_kernel")
        if new == 1:
            try:
                floor = cal.launch(f"graph_step_{'triton' if kernels == 'triton' else 'torch'}")
            except KeyError:  # an older calibration: no floor
                floor = 0.0
            step = sum(calib.values())
            if floor > step:
                calib["launch_overhead"] += floor - step
                basis.setdefault("launch_overhead", set()).add(
                    "host-bound step: graph_step floor")
    else:  # the host issues every op: the stage takes the longer of host and GPU
        impl = "triton" if kernels == "triton" else "torch"
        host = None
        for suffix in (("_prefill", "") if new > 1 else ("",)):  # the stage's own host cost
            try:
                host = (cfg.n_layers * cal.launch(f"eager_layer_{impl}{suffix}")
                        + cal.launch(f"eager_fixed_{impl}{suffix}"))
                break
            except KeyError:
                continue
        if host is None:  # an older calibration: per op
            host = launches * cal.launch("eager_op")
        elif any(getattr(cfg, f) != v for f, v in LATER_FIELDS.items()):
            # the per-layer costs are a plain layer's: experts and QK-norm issue more ops
            plain = cfg.replace(**LATER_FIELDS)
            extra = launches - sum(k.repeat * k.launches for k in kernel_list(
                plain, batch, new, context, kernels, fold, skew, draw, touched))
            host += max(extra, 0) * cal.launch("eager_op")
            basis.setdefault("launch_overhead", set()).add(
                f"{extra} MoE / QK-norm launches beyond a plain layer's at eager_op each")
        calib["launch_overhead"] = max(host, gpu) - (gpu - gaps)
        if host > gpu:  # a host-bound stage: the host's time, and how it varies
            host_lo, host_hi = EAGER_HOST_UNCERTAINTY * host, EAGER_HOST_SLOWER * host
    total = sum(calib.values())
    floor2 = spread2 + (MEASUREMENT_FLOOR[stage] * total) ** 2
    out.update(calibrated=calib, calibrated_total=total, launches=launches,
               basis={m: "; ".join(sorted(b)) for m, b in basis.items()},
               calibrated_lo=max(total - math.sqrt(floor2 + host_lo ** 2), 0.0),
               calibrated_hi=total + math.sqrt(floor2 + host_hi ** 2))
    return out


def predict(cfg: ModelConfig, workload: dict, hardware, calibration: Calibrated | None = None,
            kernels: str | None = None, mode: str = "cudagraph", ceilings: dict | None = None,
            switches: Switches | None = None, routing: dict | None = None) -> dict:
    """Predicted prefill (TTFT) and mean decode step (TPOT) of a design, per module kind.

    Args:
        cfg: the design; workload: ``batch``, ``prompt_len``, ``new_tokens``; hardware: a
            ``HardwareSpec`` (datasheet peaks); calibration: a ``Calibrated`` (None: roofline
            only); kernels: ``torch`` or ``triton`` (default ``cfg.kernels``); mode: the
            ``zoo.generate`` mode (``cudagraph``: prefill and decode replay graphs; ``compile``:
            the decode step only, its prefill eager; ``eager``); ceilings: measured ceilings
            (``copy_bytes_s``, ``gemm_flops_<dtype>``) for the roofline, else the datasheet's;
            switches: the ``kernels.switches`` the design runs under (default: the defaults);
            routing: a trial's measured routing (``sweep.measure.moe_routing``): per stage the
            distinct experts an MoE layer's tokens reached, ``moe_{stage}_experts_touched``: the
            stage's MoE kernels priced over those, each with its rows
            (``sweep.analysis.price_moe``), said in ``prediction_basis``; absent or NaN, over those
            expected under the workload's routing (``zoo.routing``: a random router's prompt may
            reach a quarter of the experts).

    Returns:
        Results-row columns (``sweep.common.row``): ``{stage}_pred_ms`` (the calibrated one where
        there is a calibration, else the roofline; NaN where the calibration cannot price the
        stage, with ``decode_pred_reason``: torch.compile's Inductor kernels),
        ``{stage}_pred_ms_roofline``,
        ``{stage}_pred_ms_calibrated``,
        ``{stage}_pred_ms_{module}`` (calibrated; roofline where uncalibrated),
        ``{stage}_pred_launches``, ``prediction_basis`` and ``prediction_notes`` (terms outside
        the calibrated range), for ``stage`` in prefill, decode; ``prediction_stale`` where the
        calibration's entries were measured under other kernels (``sweep.caches.calibration``).
        The decode step is priced at ``zoo.counts.mean_decode_context``.
    """
    kernels = kernels or cfg.kernels
    fold = (switches or Switches()).rope_in_attention
    B, T, N = workload["batch"], workload["prompt_len"], workload["new_tokens"]
    ceil = ceilings or {}
    pf = ceil.get(f"gemm_flops_{cfg.dtype}") or hardware.peak_flops(cfg.dtype)
    pb = ceil.get("copy_bytes_s") or hardware.peak_bytes_s
    ctx = mean_decode_context(T, N)
    limit = power_limit(ceil)
    warm = max(workload.get("warmup", DEFAULT_WARMUP) - 1, 0)  # the first run compiles
    middle = (workload.get("repeats", DEFAULT_REPEATS) - 1) / 2  # the median's repeat
    if calibration is not None:
        calibration.notes = []
    row = {}
    for stage, (new, context) in (("prefill", (T, T)), ("decode", (1, ctx))):
        # torch.compile's decode of the torch kernels runs Inductor's own fused kernels: not
        # calibrated; of the Triton kernels, the same launches as cudagraph (kernels.ops)
        inductor = stage == "decode" and mode == "compile" and kernels != "triton"
        cal = None if inductor else calibration
        # a decode loop's run is its N - 1 steps; the mean step sits half way through
        steps, before = (1, warm + middle) if stage == "prefill" else (
            max(N - 1, 1), warm + middle + 0.5)
        power = None if limit is None else (*limit, before, steps)
        st = _stage(cfg, B, new, context, kernels, mode, cal, (pf, pb), fold, stage, power,
                    workload.get("routing_skew", 0.0), workload.get("routing") == "uniform",
                    (routing or {}).get(f"moe_{stage}_experts_touched", math.nan))
        row[pred(stage, "roofline")] = 1e3 * st["roofline_total"]
        src = st.get("calibrated", st["roofline"])
        row[pred(stage, "calibrated")] = 1e3 * st["calibrated_total"] if cal else math.nan
        row[pred(stage)] = (row[pred(stage, "calibrated")] if cal else
                            row[pred(stage, "roofline")])  # the prediction the row stands on
        if cal is not None:
            row[pred(stage, "lo")] = 1e3 * st["calibrated_lo"]
            row[pred(stage, "hi")] = 1e3 * st["calibrated_hi"]
        if calibration is not None and cal is None:  # not predicted: NaN with the reason (the
            # roofline stays in its own column, never the row's figure)
            row[pred(stage)] = math.nan
            row["decode_pred_reason"] = ("mode=compile with kernels=torch: torch.compile's "
                                         "Inductor kernels are not modelled (the eager kernels' "
                                         "price would be a guess)")
            row.update({pred_module("decode", m): math.nan for m in MODULES})
            continue
        for m in MODULES:
            row[pred_module(stage, m)] = 1e3 * src[m]
        if calibration is not None:
            row[f"{stage}_pred_launches"] = st["launches"]
            row[f"{stage}_pred_basis"] = "; ".join(f"{m}: {b}" for m, b in st["basis"].items())
    if calibration is None:
        row["prediction_basis"] = f"roofline only ({hardware.name} peaks)"
    else:
        m = calibration.meta
        row["prediction_basis"] = (f"calibrated on {m.get('device')} ({m.get('date')})"
                                   + (f", transferred to {hardware.name} by "
                                      + (m.get("transfer") or {}).get("basis",
                                                                      "ratio of the ceilings")
                                      if m.get("transferred_to") else ""))
        if stand_in(row.get("prefill_pred_basis", "") + row.get("decode_pred_basis", "")):
            row["prediction_basis"] += STAND_INS
        row["prediction_confidence"] = confidence(row)
        stale = m.get("stale") or []
        row["prediction_stale"] = bool(stale)
        if stale:
            calibration.notes.insert(0, "stale calibration: " + ", ".join(stale) + " measured "
                                     "under other kernels or versions ("
                                     + m.get("stale_why", "calibration_policy=frozen") + ")")
        row["prediction_notes"] = "; ".join(calibration.notes)
    got = [st for st in STAGES if (routing or {}).get(f"moe_{st}_experts_touched", 0) > 0]
    if cfg.n_experts and got:  # (NaN is not > 0; the counts are the row's own columns)
        row["prediction_basis"] += (ROUTED + " ("
                                    + ", ".join(f"moe_{st}_experts_touched" for st in got) + ")")
    return row


def measured_routing(row) -> dict:
    """A results row's measured MoE routing, as ``predict``'s ``routing`` takes it: its
    ``moe_{stage}_experts_touched`` columns (a dict or a pandas row; none for a dense row)."""
    return {c: row[c] for c in (row.index if hasattr(row, "index") else row)
            if c.startswith("moe_") and c.endswith("_experts_touched")}


def row_predictions(cfg: ModelConfig, workload: dict, hardware, calibration: Calibrated | None,
                    mode: str, ceilings: dict, measured: dict | None = None,
                    why_uncalibrated: str = "", switches: Switches | None = None) -> dict:
    """``predict``'s columns for a results row and, with ``measured`` times, the signed errors
    ``{stage}_pred_error_pct`` (calibrated vs measured, %) and ``{stage}_pred_error_pct_roofline``.
    An MoE design's stages are priced on the routing ``measured`` holds (the experts its tokens
    reached: the routing is the workload's, measured like its lengths; ``predict``'s
    ``routing``), where it holds it.
    A calibration that cannot price the design leaves the calibrated columns NaN with
    ``prediction_reason``; the trial goes on."""
    routing = measured_routing(measured or {})
    try:
        row = predict(cfg, workload, hardware, calibration, mode=mode, ceilings=ceilings,
                      switches=switches, routing=routing)
    except KeyError as e:  # an entry the calibration lacks: roofline only, saying why
        row = predict(cfg, workload, hardware, None, mode=mode, ceilings=ceilings,
                      switches=switches, routing=routing)
        why_uncalibrated = f"calibration cannot price this design: {e}"
    if why_uncalibrated:
        row["prediction_reason"] = why_uncalibrated
    for st, col in TIME.items():
        meas = (measured or {}).get(col)
        if meas:
            row[error(st)] = 100 * (row[pred(st, "calibrated")] - meas) / meas
            row[error(st, "roofline")] = 100 * (row[pred(st, "roofline")] - meas) / meas
    return row
