"""cuBLASLt's own log of the GEMMs a trial ran: M, N, K, dtype per call, joined to kernel times.

cuBLASLt logs every matmul it launches when ``CUBLASLT_LOG_LEVEL=2`` ("trace: API calls that launch
CUDA kernels log their parameters"; cuBLAS docs, "cuBLASLt Logging") into ``CUBLASLT_LOG_FILE``.
A matmul trace line (``[cublasLtMatmul]`` from cuBLASLt's API, ``[cublasLtTSTMatmul]`` where
cuBLAS's ``cublasGemmEx`` dispatches to cuBLASLt, as PyTorch's ``aten::mm`` does on an H100)
carries the matrix layouts (``Adesc=[type=R_16BF rows=.. cols=..
ld=..]``, likewise B, C, D) and the operation (``computeDesc=[computeType=COMPUTE_32F ...
transa=OP_T ...]``). cuBLAS is column-major: ``D (m x n) = op(A) (m x k) @ op(B) (k x n)``, so
``m, n`` are D's rows and columns and ``k`` is A's columns (A's rows where ``transa=OP_T``).

A PyTorch ``x @ W.T`` with ``x [T, d_in]``, ``W [d_out, d_in]`` is logged as ``m = d_out``,
``n = T``, ``k = d_in``. ``join`` matches shapes to the torch.profiler op table of the same trial
(``aten::mm``/``addmm``/``bmm``/``baddbmm`` input shapes) to give achieved FLOP/s per GEMM shape.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path

_DESC = re.compile(r"\b([ABCD])desc=\[([^\]]*)\]")
_KV = re.compile(r"(\w+)=([^\s\]]+)")
_COMPUTE = re.compile(r"computeDesc=\[([^\]]*)\]")
_CALL = re.compile(r"\[cublasLt\w*Matmul\]")
_TILE = re.compile(r"tile=MATMUL_TILE_(\w+)")
DTYPES = {"R_16BF": "bf16", "R_16F": "fp16", "R_32F": "fp32", "R_8F_E4M3": "fp8_e4m3",
          "R_8F_E5M2": "fp8_e5m2", "R_8I": "int8", "R_32I": "int32", "R_64F": "fp64"}
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def env(log_path: str | Path) -> dict:
    """Environment variables that make cuBLASLt log its kernel-launching calls to ``log_path``."""
    return {"CUBLASLT_LOG_LEVEL": "2", "CUBLASLT_LOG_FILE": str(log_path)}


def parse_log(text: str) -> list[dict]:
    """One dict per matmul trace line: ``m``, ``n``, ``k``, ``batch``, ``dtype`` (A's),
    ``out_dtype`` (D's), ``compute``, ``transa``, ``transb``, ``tile`` (the algorithm's tile where
    logged), ``flops`` (``2 m n k batch``).

    Lines that are not matmul traces are skipped; a matmul line without the four layouts raises.

    Raises:
        ValueError: a ``cublasLtMatmul`` line whose layouts cannot be read (names the line).
    """
    calls = []
    for line in text.splitlines():
        if "Adesc=" not in line or not _CALL.search(line):
            continue
        descs = {name: dict(_KV.findall(body)) for name, body in _DESC.findall(line)}
        if set(descs) < {"A", "D"}:
            raise ValueError(f"cuBLASLt matmul line without A/D layouts: {line[:300]}")
        comp = dict(_KV.findall(m.group(1))) if (m := _COMPUTE.search(line)) else {}
        comp = {k.lower(): v for k, v in comp.items()}
        a, d = descs["A"], descs["D"]
        ta, tb = comp.get("transa", "OP_N"), comp.get("transb", "OP_N")
        try:
            m_, n_ = int(d["rows"]), int(d["cols"])
            k_ = int(a["rows"] if ta == "OP_T" else a["cols"])
            batch = int(d.get("batchCount", a.get("batchCount", 1)))
        except (KeyError, ValueError) as e:
            raise ValueError(f"cuBLASLt matmul line with unreadable layouts ({e}): "
                             f"{line[:300]}") from e
        calls.append({"m": m_, "n": n_, "k": k_, "batch": batch,
                      "dtype": DTYPES.get(a.get("type", ""), a.get("type", "")),
                      "out_dtype": DTYPES.get(d.get("type", ""), d.get("type", "")),
                      "compute": comp.get("computetype", ""), "transa": ta, "transb": tb,
                      "tile": (t.group(1) if (t := _TILE.search(line)) else ""),
                      "flops": 2 * m_ * n_ * k_ * batch})
    return calls


def _key(m: int, n: int, k: int) -> tuple:
    return (min(m, n), max(m, n), k)


def _op_key(op: str, shapes: list) -> tuple | None:
    """``(min(m, n), max(m, n), k)`` of a torch GEMM op from its input shapes, else None."""
    try:
        if op == "aten::mm":
            (a, b), (_, c) = shapes[0], shapes[1]
            return _key(a, c, b)
        if op == "aten::addmm":
            (a, b), (_, c) = shapes[1], shapes[2]
            return _key(a, c, b)
        if op in ("aten::bmm", "aten::baddbmm"):
            x, y = (shapes[0], shapes[1]) if op == "aten::bmm" else (shapes[1], shapes[2])
            return _key(x[1], y[2], x[2])
    except (IndexError, TypeError, ValueError):
        return None
    return None


def join(calls: list[dict], op_rows: list[dict]) -> list[dict]:
    """Per GEMM shape: the log's calls grouped by ``(m, n, k, batch, dtype, transa, transb)``,
    with the torch op table's device time where an op of the same shape was profiled.

    Args:
        calls: ``parse_log`` output (every call in the process: warm-up, timed and profiled).
        op_rows: rows of ``torch_ops_<stage>.csv`` (``op``, ``input_shapes`` JSON, ``calls``,
            ``self_device_us``), or ``[]``.

    Returns:
        Rows sorted by total log FLOPs: the shape fields, ``log_calls``, ``profiled_calls``,
        ``profiled_device_us``, ``achieved_flop_s`` (FLOP/s over the profiled calls; NaN with
        ``reason`` when no profiled op matches the shape).
    """
    prof: dict[tuple, list[float]] = {}
    for r in op_rows:
        if r.get("op") not in GEMM_OPS:
            continue
        key = _op_key(r["op"], json.loads(r["input_shapes"]) if isinstance(r["input_shapes"], str)
                      else r["input_shapes"])
        if key is None:
            continue
        c, t = prof.setdefault(key, [0.0, 0.0]), float(r.get("self_device_us") or 0)
        c[0] += float(r["calls"])
        c[1] += t
    groups = Counter((c["m"], c["n"], c["k"], c["batch"], c["dtype"], c["transa"], c["transb"])
                     for c in calls)
    out = []
    for (m, n, k, batch, dtype, ta, tb), count in groups.items():
        row = {"m": m, "n": n, "k": k, "batch": batch, "dtype": dtype, "transa": ta,
               "transb": tb, "flops_per_call": 2 * m * n * k * batch, "log_calls": count}
        got = prof.get(_key(m, n, k))
        if got and got[1] > 0:
            row.update(profiled_calls=got[0], profiled_device_us=got[1],
                       achieved_flop_s=2 * m * n * k * batch * got[0] / (got[1] * 1e-6),
                       reason="")
        else:
            row.update(profiled_calls=0, profiled_device_us=math.nan, achieved_flop_s=math.nan,
                       reason="no profiled torch op of this shape (profile=torch joins them)")
        out.append(row)
    return sorted(out, key=lambda r: -r["flops_per_call"] * r["log_calls"])


def summarize(trial_dir: Path) -> dict:
    """Parse ``<trial_dir>/cublaslt.log``, join it to ``torch_ops_*.csv`` there, write
    ``cublaslt_gemms.csv`` and return the row's columns: ``gemm_shapes`` (distinct shapes),
    ``gemm_calls_logged`` and ``gemm_top_shapes`` (JSON: the five shapes with the most FLOPs and
    their achieved TFLOP/s), or ``gemm_shapes_reason`` when there is no log."""
    log = trial_dir / "cublaslt.log"
    if not log.exists() or not log.stat().st_size:
        return {"gemm_shapes": math.nan,
                "gemm_shapes_reason": "no cuBLASLt log (no GEMM ran through cuBLASLt, or a CPU "
                                      "run)"}
    calls = parse_log(log.read_text(errors="replace"))
    ops = []
    for f in sorted(trial_dir.glob("torch_ops_*.csv")):
        with open(f, newline="") as fh:
            ops.extend(csv.DictReader(fh))
    rows = join(calls, ops)
    if rows:
        with open(trial_dir / "cublaslt_gemms.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    top = [{"mnk": [r["m"], r["n"], r["k"]], "batch": r["batch"], "dtype": r["dtype"],
            "calls": r["log_calls"], "tflop_s": round(r["achieved_flop_s"] / 1e12, 2)
            if math.isfinite(r["achieved_flop_s"]) else None} for r in rows[:5]]
    return {"gemm_shapes": len(rows), "gemm_calls_logged": len(calls),
            "gemm_top_shapes": json.dumps(top)}
