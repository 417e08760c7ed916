"""torch.profiler mode, Nsight Systems SQLite analysis, cuBLASLt log parsing, and each mode's
message where its tool is missing (CPU only)."""

import json
import math
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from sweep.measure import cublaslt, nsys
from sweep.measure.torch_prof import category, timeline
from sweep.plan import plan_from_config
from tests.helpers import compose_cfg, run_tiny, tiny_overrides

FIX = Path(__file__).parent / "fixtures"


def test_timeline_active_and_gaps():
    t = timeline([(0, 10), (5, 20), (30, 40), (45, 50)])  # overlap merged; gaps 10 and 5
    assert t["busy"] == 35 and t["span"] == 50 and t["active_pct"] == pytest.approx(70)
    assert t["gaps"] == 2 and t["gap_max"] == 10 and t["gap_median"] == 7.5
    assert math.isnan(timeline([])["active_pct"])


@pytest.mark.parametrize("name,want", [
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>", "gemm"),
    ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35", "attention"),
    ("_split_kernel", "attention"),
    ("void at::vectorized_elementwise_kernel<4, at::rsqrt_kernel_cuda>", "norm"),
    ("_rmsnorm_residual_kernel", "norm"),
    ("void at::vectorized_elementwise_kernel<8, at::bfloat16_copy_kernel_cuda>", "memory copy"),
    ("Memcpy HtoD (Pageable -> Device)", "memory copy"),
    ("void at::vectorized_elementwise_kernel<8, at::silu_kernel>", "elementwise"),
    ("some_custom_kernel", "other"),
])
def test_kernel_categories(name, want):
    assert category(name) == want


def test_profile_torch_on_cpu_keeps_op_table_and_trace(tmp_path):
    plan, _, df = run_tiny(tmp_path, "profile=torch", "study.n_trials=1")
    r = df.iloc[0]
    assert r["state"] == "COMPLETE"
    ops = json.loads(r["decode_torch_top_ops"])
    assert ops and all({"op", "input_shapes", "calls"} <= set(o) for o in ops)
    assert r["decode_profiler_flops"] > 0  # torch counts the aten::mm FLOPs
    trial = tmp_path / plan.results.name / "trials" / "0000" / "torch"
    table = pd.read_csv(trial / "torch_ops_decode.csv")
    assert "aten::mm" in set(table["op"]) and table["calls"].sum() > 0
    trace = json.loads((trial / "trace_decode.json").read_text())  # Perfetto/Chrome trace format
    assert any(e.get("name") == "aten::mm" for e in trace["traceEvents"])
    assert pd.isna(r["decode_gpu_active_pct"])
    assert r["decode_gpu_active_pct_reason"] == "CPU run: no GPU kernels"
    assert r["gemm_shapes_reason"].startswith("no cuBLASLt log")  # no cuBLAS on the CPU


def test_nsys_sqlite_analysis(tmp_path):
    db = tmp_path / "report.sqlite"  # analyse opens the file read-only, as nsys leaves it
    with sqlite3.connect(db) as con:
        con.executescript((FIX / "nsys_decode_small.sql").read_text())
    out = nsys.analyse(db, "decode", steps=1)
    assert out["decode_nsys_kernels"] == 5
    assert out["decode_nsys_kernel_ms"] == pytest.approx(0.1)
    assert out["decode_nsys_gpu_active_pct"] == pytest.approx(100 * 100 / 135)
    assert out["decode_nsys_gpu_gaps"] == 4 and out["decode_nsys_gpu_gap_max_us"] == 15
    assert out["decode_nsys_gpu_gap_median_us"] == 7.5
    assert out["decode_nsys_range_ms"] == pytest.approx(
        {"decode": 0.1, "ffn": 0.04, "lm_head": 0.04, "layer0": 0.03, "layer1": 0.03,
         "attn": 0.02})


def test_nsys_rejects_a_file_without_kernels(tmp_path):
    p = tmp_path / "empty.sqlite"
    sqlite3.connect(p).executescript("CREATE TABLE StringIds (id INTEGER, value TEXT);")
    with pytest.raises(ValueError, match="no CUPTI_ACTIVITY_KIND_KERNEL"):
        nsys.analyse(p, "decode")


def test_nsys_command_and_missing_tool(tmp_path, monkeypatch):
    cmd = nsys.command(tmp_path / "r")
    assert cmd[:2] == ["nsys", "profile"] and "cuda,nvtx,osrt,cublas" in cmd
    assert cmd[cmd.index("--capture-range") + 1] == "cudaProfilerApi"
    n = nsys.command(tmp_path / "r", capture="nvtx", nvtx_range="decode")
    assert n[n.index("--nvtx-capture") + 1] == "decode"
    with pytest.raises(ValueError):
        nsys.command(tmp_path / "r", capture="nvtx")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "Nsight Systems is not installed" in nsys.available()
    with pytest.raises(RuntimeError, match="profile=nsys needs Nsight Systems"):
        plan_from_config(compose_cfg(tiny_overrides(tmp_path, "profile=nsys")))


def test_ncu_mode_without_ncu_goes_on_with_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(__import__("sys").executable).parent))  # python, no ncu
    plan, _, df = run_tiny(tmp_path, "profile=ncu", "study.n_trials=1")
    r = df.iloc[0]
    assert r["state"] == "COMPLETE"
    assert "Nsight Compute not installed" in r["decode_ncu_reason"]
    assert "Nsight Compute not installed" in r["prefill_ncu_reason"]


LT = ("[2026-11-22 19:02:11][cublasLt][4242][Trace][cublasLtMatmul] A=0x7f0a00000000 "
      "Adesc=[type=R_16BF rows=2048 cols=8192 ld=2048] B=0x7f0b00000000 "
      "Bdesc=[type=R_16BF rows=2048 cols=8 ld=2048] C=0x7f0c00000000 "
      "Cdesc=[type=R_16BF rows=8192 cols=8 ld=8192] D=0x7f0c00000000 "
      "Ddesc=[type=R_16BF rows=8192 cols=8 ld=8192] computeDesc=[computeType=COMPUTE_32F "
      "scaleType=R_32F transa=OP_T] algo=[algoId=66 tile=MATMUL_TILE_UNDEFINED] "
      "workSpace=0x7f0d00000000 workSpaceSizeInBytes=33554432 beta=0 outOfPlace=0 "
      "stream=0x0")


def test_cublaslt_log_parse_and_join():
    text = "\n".join([
        "[2026-11-22 19:02:11][cublasLt][4242][Api][cublasLtCreate] lightHandle=0x7ffc",
        LT, LT,
        LT.replace("rows=8192 cols=8 ld=8192", "rows=2048 cols=8 ld=2048")
          .replace("Adesc=[type=R_16BF rows=2048 cols=8192", "Adesc=[type=R_16BF rows=2048 "
                   "cols=2048").replace("transa=OP_T", "transa=OP_N"),
    ])
    calls = cublaslt.parse_log(text)
    assert len(calls) == 3
    c = calls[0]
    # x [8, 2048] @ W[8192, 2048].T: D is 8192 x 8 column-major, k = A's rows under OP_T
    assert (c["m"], c["n"], c["k"], c["dtype"], c["compute"]) == (8192, 8, 2048, "bf16",
                                                                   "COMPUTE_32F")
    assert c["flops"] == 2 * 8192 * 8 * 2048
    assert (calls[2]["m"], calls[2]["k"]) == (2048, 2048)  # OP_N: k = A's cols
    ops = [{"op": "aten::mm", "input_shapes": json.dumps([[8, 2048], [2048, 8192]]),
            "calls": 4, "self_device_us": 40.0},
           {"op": "aten::linear", "input_shapes": json.dumps([[8, 2048], [8192, 2048]]),
            "calls": 4, "self_device_us": 0.0}]
    rows = cublaslt.join(calls, ops)
    top = rows[0]
    assert (top["m"], top["n"], top["k"], top["log_calls"]) == (8192, 8, 2048, 2)
    assert top["achieved_flop_s"] == pytest.approx(2 * 8192 * 8 * 2048 * 4 / 40e-6)
    assert math.isnan(rows[1]["achieved_flop_s"]) and "no profiled torch op" in rows[1]["reason"]


def test_cublaslt_unreadable_line_names_it():
    with pytest.raises(ValueError, match="without A/D layouts"):
        cublaslt.parse_log("[x][cublasLt][1][Trace][cublasLtMatmul] Adesc=[type=R_16BF rows=1]")


def test_cublaslt_parses_a_real_h100_log():
    """Lines of the cuBLASLt log of the Llama-3.2-1B shape (batch 1, prompt 512, torch kernels)
    from `bash bench/reference/run_profiling.sh torch` on an H100, 2026-11-22: PyTorch's
    aten::mm reaches cuBLASLt as cublasLtTSTMatmul."""
    calls = cublaslt.parse_log((FIX / "cublaslt_llama3_2_1b_b1_h100.log").read_text())
    assert len(calls) == 22
    shapes = {(c["m"], c["n"], c["k"], c["batch"]) for c in calls}
    # prefill: fused QKV (32 + 2*8 heads of 64 = 3072), o_proj, gate+up (2 x 8192), down
    assert {(3072, 512, 2048, 1), (2048, 512, 2048, 1), (16384, 512, 2048, 1),
            (2048, 512, 8192, 1)} <= shapes
    assert (3072, 1, 2048, 1) in shapes  # decode: one token per sequence
    assert (576, 4, 64, 8) in shapes  # masked decode attention: batched over the 8 KV heads
    assert all(c["dtype"] == "bf16" and c["compute"] == "COMPUTE_32F" for c in calls)
    assert calls[0]["tile"] == "96x128"
