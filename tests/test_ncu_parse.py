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
