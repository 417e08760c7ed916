"""The results row, declared once: its stages, the names of its figures, their units, words and
directions. Measurement, analysis and report read this; a new figure is declared here first.

One wide row per trial (``DESIGN.md``): design fields as ``zoo.ModelConfig`` names them, the
workload (``WORKLOAD``), measured figures with the stage first and the unit last, analytic and
derived ones, predictions, environment and status. Two stages: ``prefill`` (its measured time is
``ttft_ms``: time to first token, the name the field uses; every other prefill figure is
``prefill_*``) and ``decode`` (``decode_tpot_ms``: time per output token). ``TIME`` maps a stage to
its time column, ``RATE`` to its tokens/s; ``pred``/``pred_module``/``meas_module``/``error`` name
the performance model's columns. A record written before a rename still loads: ``upgrade`` maps
its old names (``RENAMES``).
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.counts import MODULES as ZOO_MODULES

STAGES = ("prefill", "decode")
TIME = {"prefill": "ttft_ms", "decode": "decode_tpot_ms"}  # the stage's measured median time
RATE = {"prefill": "prefill_tok_s", "decode": "decode_tok_s"}  # batch x tokens / that time
WORKLOAD = ("batch", "prompt_len", "new_tokens", "routing_skew", "routing")
# the performance model's module kinds (sweep.analysis.predict prices each): the zoo's
# (``zoo.counts.MODULES``, also the profiler's) and the step's launch overhead
MODULES = (*ZOO_MODULES, "launch_overhead")
PRED_KINDS = ("roofline", "calibrated", "lo", "hi")
SPREADS = ("min", "p90")  # of a measured time over its repeats


def pred(stage: str, kind: str | None = None) -> str:
    """The predicted time (ms) of ``stage``: ``{stage}_pred_ms``, the prediction the row stands
    on (its ``prediction_basis`` says which: calibrated, transferred, or roofline x stated
    efficiencies), or one kind of it, ``{stage}_pred_ms_{kind}`` (``PRED_KINDS``: ``roofline``,
    ``calibrated``, the interval ``lo`` .. ``hi``). In a predict-only study's rows the measured
    names (``TIME``, ``RATE``) hold the prediction too, with ``predicted`` true: the study's
    objectives and fronts read them."""
    return f"{stage}_pred_ms" + (f"_{kind}" if kind else "")


def pred_module(stage: str, module: str) -> str:
    """The predicted time (ms) of one module kind in ``stage``."""
    return f"{stage}_pred_ms_{module}"


def meas_module(stage: str, module: str) -> str:
    """The measured kernel time (ms) of one module kind in ``stage`` (``profile=modules``)."""
    return f"{stage}_meas_ms_{module}"


def error(stage: str, kind: str = "calibrated") -> str:
    """The signed error (%) of the calibrated (or ``kind``) prediction against the measured time
    of ``stage``."""
    return f"{stage}_pred_error_pct" + ("" if kind == "calibrated" else f"_{kind}")


def mfu(stage: str, peak: str = "measured") -> str:
    """Model FLOPs utilization of ``stage`` against the ``measured`` GEMM ceiling or the
    ``datasheet`` peak (a fraction)."""
    return f"{stage}_mfu_vs_{peak}"


def mbu(stage: str, peak: str = "measured") -> str:
    """Memory bandwidth utilization of ``stage`` against the ``measured`` copy bandwidth or the
    ``datasheet`` one (a fraction)."""
    return f"{stage}_mbu_vs_{peak}"


def energy(stage: str) -> str:
    """Energy per token of ``stage`` (J/token; ``profile=nvml``, or TDP-bound when predicted)."""
    return f"{stage}_j_per_token"


PEAK_MEM = "peak_mem_bytes"  # the allocator's peak over the trial (bytes)
# a row measured while another process used the device (``sweep.measure.contention``), with the
# evidence in ``contended_evidence``: compare and compare_fronts mark it and judge nothing on it
CONTENDED = "contended"


def spread(col: str, which: str) -> str:
    """A measured time's spread column: ``{col}_{which}`` (``SPREADS``)."""
    return f"{col}_{which}"


@dataclass(frozen=True)
class Column:
    """A figure of the row: ``name``, ``unit`` (ms, tokens/s, bytes, J/token, fraction, ...),
    ``words`` (with the unit, as a person reads it), ``scale`` (divide by it to show ``words``'s
    unit), ``stage`` (or None), ``direction`` (``max``: more is better; ``min``; None), ``time``
    (the time column behind a rate or time, whose spread it shares)."""

    name: str
    unit: str
    words: str
    scale: float = 1.0
    stage: str | None = None
    direction: str | None = None
    time: str | None = None
    kind: str = "measured"  # measured | derived | analytic (zoo.counts names it)


COLUMNS = {c.name: c for c in (
    Column("decode_tok_s", "tokens/s", "decode tokens/s", stage="decode", direction="max",
           time="decode_tpot_ms"),
    Column("prefill_tok_s", "tokens/s", "prefill tokens/s", stage="prefill", direction="max",
           time="ttft_ms"),
    Column("ttft_ms", "ms", "time to first token, TTFT (ms)", stage="prefill", direction="min",
           time="ttft_ms"),
    Column("decode_tpot_ms", "ms", "time per output token, TPOT (ms)", stage="decode",
           direction="min", time="decode_tpot_ms"),
    Column("params_non_embedding", "parameters", "non-embedding parameters", direction="max",
           kind="analytic"),
    Column("params_total", "parameters", "parameters", direction="max", kind="analytic"),
    Column("params_active", "parameters", "active parameters (per token)", direction="max",
           kind="analytic"),
    Column("kv_bytes_per_token", "bytes", "KV-cache bytes per token", direction="min",
           kind="analytic"),
    # the cache the workload holds: a local layer keeps only its window (zoo.counts.kv_cache_bytes)
    Column("kv_cache_bytes", "bytes", "KV cache held (bytes)", direction="min", kind="analytic"),
    Column("peak_mem_bytes", "bytes", "peak GPU memory", direction="min"),
    Column("decode_j_per_token", "J/token", "decode energy (J/token)", stage="decode",
           direction="min"),
    Column("prefill_j_per_token", "J/token", "prefill energy (J/token)", stage="prefill",
           direction="min"),
    Column("prefill_mfu_vs_measured", "fraction of peak",
           "prefill MFU (of the measured GEMM ceiling)", stage="prefill", direction="max",
           kind="derived"),
    Column("prefill_mfu_vs_datasheet", "fraction of peak", "prefill MFU (of the datasheet peak)",
           stage="prefill", direction="max", kind="derived"),
    Column("decode_mbu_vs_measured", "fraction of peak",
           "decode MBU (of the measured copy bandwidth)", stage="decode", direction="max",
           kind="derived"),
    Column("decode_mbu_vs_datasheet", "fraction of peak",
           "decode MBU (of the datasheet bandwidth)", stage="decode", direction="max",
           kind="derived"),
)}
OBJECTIVES = tuple(COLUMNS)  # what a study may optimize

# the columns a short table shows, and the report's trials table, in order
# a mixture of experts' columns, shown where a table holds one (``report.tables.shows_moe``)
MOE_SHOWN = ("n_experts", "n_experts_active", "expert_ffn_dim", "params_active")
# sliding-window designs' columns, shown where a table holds one (``report.tables.shown``)
WINDOW_SHOWN = ("sliding_window", "layer_types", "kv_cache_bytes")
SUMMARY = ("number", "state", "n_kv_heads", "n_heads", "head_dim", "d_model", "n_layers",
           "ffn_dim", "n_experts", "n_experts_active", "expert_ffn_dim", "sliding_window",
           "layer_types", "batch", "prompt_len",
           TIME["prefill"], TIME["decode"], RATE["decode"], mfu("prefill"), mbu("decode"),
           "kv_bytes_per_token", "kv_cache_bytes", PEAK_MEM, "decode_bound", "fail_reason")
# the design and workload columns of the predicted table (shown where they vary), then its figures
PREDICTED_DESIGN = ("n_heads", "n_kv_heads", "head_dim", "d_model", "n_layers", "ffn_dim",
                    "n_experts", "n_experts_active", "expert_ffn_dim", "sliding_window",
                    "layer_types", "kv_lora_rank", "qk_norm", "attn_sinks", "kv_dtype", "kernels",
                    "mode", *WORKLOAD)
# the measured table's columns shown only where they vary (a study over kernels, modes or routing)
SUMMARY_VARYING = ("kv_dtype", "kernels", "mode", "routing_skew", "routing")
PREDICTED_SUMMARY = (*PREDICTED_DESIGN, TIME["prefill"], TIME["decode"], RATE["decode"],
                     "kv_bytes_per_token", "kv_cache_bytes", "params_non_embedding",
                     "params_active", "basis_kind", "state")
# the report's trials table and its prediction table
REPORT = ("number", "state", "mode", "n_heads", "n_kv_heads", "head_dim", "d_model", "n_layers",
          "ffn_dim", "kv_dtype", "kernels", "params_non_embedding", "kv_bytes_per_token",
          TIME["prefill"], TIME["decode"], spread(TIME["decode"], "min"),
          spread(TIME["decode"], "p90"), RATE["decode"], RATE["prefill"],
          mfu("prefill"), mbu("decode"), energy("decode"), "decode_dram_bytes_over_min",
          PEAK_MEM, "prefill_bound", "decode_bound",
          "noisy", CONTENDED, "worker_gpu", "fail_reason")
REPORT_PREDICTED = (TIME["prefill"], pred("prefill", "calibrated"), error("prefill"),
                    pred("prefill", "roofline"), TIME["decode"], pred("decode", "calibrated"),
                    error("decode"), pred("decode", "roofline"),
                    pred_module("decode", "attention"), pred_module("decode", "ffn"),
                    pred_module("decode", "launch_overhead"), "prediction_basis",
                    "prediction_notes")
# a regression check compares these, each in its direction, with the spread of the time behind
REGRESSION = (TIME["decode"], TIME["prefill"], RATE["decode"], RATE["prefill"], PEAK_MEM,
              energy("decode"))


def spread_of(col: str) -> tuple[str, str] | None:
    """``(min, p90)`` columns of the measured time behind ``col`` (a time, or a rate of it, whose
    spread is its time's: a rate is worse exactly when its time is longer), or None."""
    c = COLUMNS.get(col)
    return (spread(c.time, "min"), spread(c.time, "p90")) if c and c.time else None

# names a record of an earlier day used, and today's name (add here first)
RENAMES: dict[str, str] = {f"{st}_flops_attn": f"{st}_flops_attention"  # 2026-11-27: one spelling
                           for st in STAGES}


def renamed(names) -> dict[str, str]:
    """``{old: today's}`` for the names among ``names`` (a row's keys, a table's columns) that an
    earlier day used (``RENAMES``), where today's is not there too (today's win)."""
    have = set(names)
    return {old: new for old, new in RENAMES.items() if old in have and new not in have}


def upgrade(row: dict) -> dict:
    """A row (or record) of an earlier day with today's names (``renamed``)."""
    out = dict(row)
    for old, new in renamed(row).items():
        out[new] = out.pop(old)
    return out
