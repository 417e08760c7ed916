"""How much a compute-bound kernel slows under the board's power limit when the stage around it is
not all GEMM (issue 38 item 4: the MoE prefills priced 4-10% long on the H100 with every
compute-bound kernel slowed by the sustained GEMM's full ratio).

For each duty ``h`` (the share of busy time in the GEMM), an 8192^3 bf16 GEMM (``sweep.measure.
ceilings``' sustained GEMM) and ``k`` device-to-device copies of ``COPY_BYTES`` (memory-bound,
lower power), each a CUDA graph, replayed alternately back to back for ``ceilings.SUSTAIN_S``
from ``ceilings.IDLE_S`` of idle (``ceilings.alternate``), every replay timed (CUDA events).
Per duty: the GEMM's median time over the run's second half against its burst time (short
readings, as the ceilings time it) = the slow-down ``r(h)``; the copies' likewise; the SM clock
and board power sampled by NVML (``sweep.measure.nvml``). ``h = 1`` is the ceilings' own measurement.

    python -m bench.power_mix_probe OUT_DIR      # OUT_DIR/power_mix.json, power_mix.md

Nothing here reads a held-out design: the workloads are synthetic.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from sweep.measure.ceilings import alternate, capture, replay_times

N = 8192
COPY_BYTES = 256 << 20
RUNS = 2  # per duty; each run ceilings.SUSTAIN_S long after ceilings.IDLE_S of idle
DUTIES = (1.0, 0.85, 0.7, 0.5, 0.3)


def _burst(g, n=5, reads=5, pause=0.2) -> float:
    """The median over ``reads`` readings (``pause`` s apart) of ``n`` replays' median time (s)."""
    med = []
    for _ in range(reads):
        time.sleep(pause)
        g.replay()
        med.append(statistics.median(replay_times([g] * n)))
    return statistics.median(med)


def _run(gemm, copy, k: int, sampler) -> dict:
    """GEMM then ``k`` copies, back to back (``ceilings.alternate``), NVML sampling."""
    with sampler.region(f"k{k}"):
        tg, tc = alternate(gemm, copy, k)
    late = lambda t: t[len(t) // 2:]  # noqa: E731
    return {"gemm_late_s": statistics.median(late(tg)),
            "copy_late_s": statistics.median(late(tc)) if tc else float("nan"),
            "gemm_calls": len(tg), "copy_calls": len(tc)}


def main(argv=None) -> int:
    from sweep.measure.nvml import NvmlSampler

    out = Path((argv or sys.argv[1:])[0])
    out.mkdir(parents=True, exist_ok=True)
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    gemm = capture(lambda: torch.mm(a, b, out=c))
    copy = capture(lambda: dst.copy_(src))
    t_g, t_c = _burst(gemm), _burst(copy)
    rows = []
    for h in DUTIES:
        k = 0 if h >= 1 else max(1, round(t_g * (1 - h) / (h * t_c)))
        duty = t_g / (t_g + k * t_c)
        for i in range(RUNS):
            s = NvmlSampler(interval_s=0.01)
            r = _run(gemm, copy, k, s)
            smp = [x for x in s.samples if x.get("t_s", 0) > 0]
            half = smp[len(smp) // 2:]
            clk = [x["sm_clock_mhz"] for x in half if x.get("sm_clock_mhz") == x.get("sm_clock_mhz")]
            pw = [x["power_w"] for x in half if x.get("power_w") == x.get("power_w")]
            rows.append({"duty_target": h, "copies_per_gemm": k, "duty": duty, "run": i,
                         "gemm_slowdown": r["gemm_late_s"] / t_g,
                         "copy_slowdown": r["copy_late_s"] / t_c if k else float("nan"),
                         "sm_clock_mhz_late": statistics.median(clk) if clk else float("nan"),
                         "power_w_late": statistics.median(pw) if pw else float("nan"), **r})
            print(json.dumps(rows[-1]), flush=True)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "gemm_burst_s": t_g, "copy_burst_s": t_c, "copy_bytes": COPY_BYTES, "rows": rows,
           "command": " ".join(sys.argv)}
    (out / "power_mix.json").write_text(json.dumps(res, indent=1))
    lines = [f"# Power limit under a mix, {res['device']} (GEMM burst {1e3 * t_g:.3f} ms, copy "
             f"{1e3 * t_c:.3f} ms)", "",
             "| duty (GEMM share) | copies / GEMM | run | GEMM slow-down | copy slow-down | SM MHz | W |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['duty']:.2f} | {r['copies_per_gemm']} | {r['run']} | {r['gemm_slowdown']:.3f} | "
              f"{r['copy_slowdown']:.3f} | {r['sm_clock_mhz_late']:.0f} | {r['power_w_late']:.0f} |"
              for r in rows]
    (out / "power_mix.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
