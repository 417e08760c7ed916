"""Nsight Compute CSV parsing and per-stage sums (constructed output in ncu's raw-page layout)."""

import json
import math

import pytest

from sweep.measure import ncu


def _csv(rows):
    cols = ["ID", "Process ID", "Kernel Name"] + list(ncu.METRICS.values())
    units = ["", "", ""] + ["" for _ in ncu.METRICS]
    lines = ["==PROF== Connected to process 1", ",".join(f'"{c}"' for c in cols),
             ",".join(f'"{u}"' for u in units)]
    for i, (name, vals) in enumerate(rows):
        vs = [str(vals.get(k, "n/a")) for k in ncu.METRICS]
        lines.append(",".join(f'"{v}"' for v in [i, 1, name] + vs))
    return "\n".join(lines) + "\n==PROF== Disconnected\n"


def test_parse_and_stage_summary():
    text = _csv([("gemv_bf16", dict(time_ns="1,000", dram_read="3,000,000", dram_write=1000,
                                    l2_hit_pct=10, tensor_pipe_pct=0, occupancy_pct=50,
                                    stall_long_scoreboard=5, stall_wait=1)),
                 ("_split_kernel", dict(time_ns=3000, dram_read=1_000_000, dram_write=0,
                                        l2_hit_pct=50, tensor_pipe_pct=20, occupancy_pct=25,
                                        stall_long_scoreboard=1, stall_wait=2))])
    rows = ncu.parse_csv(text)
    assert [r["kernel"] for r in rows] == ["gemv_bf16", "_split_kernel"]
    assert rows[0]["dram_read"] == 3e6 and math.isnan(rows[0]["sm_throughput_pct"])
    s = ncu.stage_summary(rows, "decode", steps=2)
    assert s["decode_dram_bytes"] == pytest.approx((3e6 + 1000 + 1e6) / 2)
    assert s["decode_l2_hit_pct"] == pytest.approx((10 * 1000 + 50 * 3000) / 4000)
    assert s["decode_top_stall"] == "long_scoreboard"  # 5*1000+1*3000 > 1*1000+2*3000
    assert json.loads(s["decode_ncu_top_kernels"]) == {"_split_kernel": 0.75, "gemv_bf16": 0.25}


def test_refusal_is_reported():
    with pytest.raises(ValueError, match="ERR_NVGPUCTRPERM"):
        ncu.parse_csv("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")


def test_command_is_an_argument_list():
    cmd = ncu.command("/tmp/x.csv")
    assert cmd[:3] == ["ncu", "--clock-control", "none"] and "--profile-from-start" in cmd
    assert "dram__bytes_read.sum" in cmd[cmd.index("--metrics") + 1]


def test_a_probes_extra_metrics_are_collected_and_read_back():
    """``command(extra=...)`` asks ncu for a probe's own metrics beside the set's, and
    ``parse_csv(text, extra)`` returns them under their ncu names (NaN where not reported)."""
    extra = ("launch__grid_size", "launch__registers_per_thread")
    cmd = ncu.command("/tmp/x.csv", "memory", extra=extra)
    names = cmd[cmd.index("--metrics") + 1].split(",")
    assert names == [ncu.METRICS[k] for k in ncu.METRIC_SETS["memory"]] + list(extra)
    text = _csv([("gemv_bf16", dict(time_ns=1000))]).replace(
        '"Kernel Name",', '"Kernel Name","launch__grid_size",').replace(
        '"0","1","gemv_bf16",', '"0","1","gemv_bf16","1,024",').replace('"","","",', '"","","","",', 1)
    row = ncu.parse_csv(text, extra)[0]
    assert row["launch__grid_size"] == 1024 and math.isnan(row["launch__registers_per_thread"])
    assert row["time_ns"] == 1000


def test_parses_a_real_h100_report():
    """The prefill window of the Llama-3.2-1B shape (batch 1, prompt 512, torch kernels), from
    `bash bench/reference/run_ncu.sh` on an H100 (ncu 2025.3.1), 2026-11-22."""
    import gzip
    from pathlib import Path

    from zoo import ModelConfig, counts

    path = Path(__file__).parent / "fixtures" / "ncu_prefill_llama3_2_1b_b1_h100.csv.gz"
    rows = ncu.parse_csv(gzip.decompress(path.read_bytes()).decode())
    assert len(rows) == 669
    s = ncu.stage_summary(rows, "prefill")
    floor = counts.prefill(ModelConfig.from_name("llama3_2_1b"), 1, 512).min_bytes
    # every weight is read at least once: measured DRAM bytes cannot fall below the minimum
    assert floor < s["prefill_dram_bytes"] < 2 * floor
    assert 0 < s["prefill_l2_hit_pct"] < 100 and 0 < s["prefill_tensor_pipe_pct"] < 100
    assert s["prefill_top_stall"] == "long_scoreboard"
    assert any("nvjet_sm90" in k for k in json.loads(s["prefill_ncu_top_kernels"]))


def test_real_h100_decode_step_bytes_near_the_analytic_minimum():
    """One decode step of the Llama-3.2-1B shape (GQA-8, batch 8, prompt 2048, Triton kernels)
    under ncu on an H100 (`bash bench/reference/run_profiling.sh ncu`, 2026-11-22): the memory
    set over every kernel of step 2, the detail set over layer 0 and the LM head."""
    import gzip
    from pathlib import Path

    from zoo import ModelConfig, counts

    fix = Path(__file__).parent / "fixtures"
    rows = ncu.parse_csv(gzip.decompress(
        (fix / "ncu_decode_memory_llama3_2_1b_b8_p2048_h100.csv.gz").read_bytes()).decode())
    detail = ncu.parse_csv(gzip.decompress(
        (fix / "ncu_decode_detail_llama3_2_1b_b8_p2048_h100.csv.gz").read_bytes()).decode())
    assert len(rows) == 212 and all(math.isnan(r["l2_hit_pct"]) for r in rows)  # memory set only
    assert 0 < len(detail) < len(rows) / 4  # one layer of 16 and the LM head
    s = ncu.stage_summary(rows, "decode", steps=1, detail=detail)
    cfg = ModelConfig.from_name("llama3_2_1b", kernels="triton")
    floor = counts.decode_step(cfg, 8, 2048 + 2).min_bytes  # step 2 after the prompt
    assert abs(s["decode_dram_bytes"] / floor - 1) < 0.15  # the bound; measured 1.011
    assert 0 < s["decode_l2_hit_pct"] < 100 and 0 < s["decode_occupancy_pct"] < 100
    assert s["decode_top_stall"] == "long_scoreboard"
    shares = json.loads(s["decode_ncu_top_kernels"])
    assert any(k.startswith("nvjet_sm90") for k in shares) and "_split_kernel" in shares


def test_detail_rows_give_the_rates():
    mem = ncu.parse_csv(_csv([("a", dict(time_ns=1000, dram_read=10, dram_write=0)),
                              ("b", dict(time_ns=1000, dram_read=30, dram_write=0))]))
    det = ncu.parse_csv(_csv([("a", dict(time_ns=500, l2_hit_pct=80, tensor_ops_bf16=7,
                                         stall_wait=3))]))
    s = ncu.stage_summary(mem, "prefill", detail=det)
    assert s["prefill_dram_bytes"] == 40 and s["prefill_l2_hit_pct"] == 80
    assert s["prefill_tensor_flops_bf16"] == 7 and s["prefill_top_stall"] == "wait"
    with pytest.raises(ValueError, match="metric set"):
        ncu.command("/tmp/x.csv", "everything")
    assert ncu.command("/tmp/x.csv", "memory")[-1] == "/tmp/x.csv"
