"""Why long prefills run slower than their kernels timed apart (issue 24's prefill tail).

Samples the SM clock, the board power and the clock-event reasons (NVML, every 2 ms) while
(1) one large bf16 GEMM runs back to back for 2 s from idle, then at a 50% duty cycle (as the
calibration times it), and (2) the development set's long prefills run back to back and with
idle between them. Writes ``$OUT/power_probe.json`` (per-call times with their start offsets,
the samples, phase marks). Development designs only: the held-out set is never looked at here.

    python3 bench/reference/power_probe.py
    SKIP_GEMM=1 PREFILLS=name:preset:batch:prompt,... python3 bench/reference/power_probe.py

``PREFILLS`` names other designs' prefills; keep the frozen held-out pairs out of it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pynvml
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from zoo import Generator, ModelConfig, Transformer  # noqa: E402

OUT = Path(os.environ.get("OUT", "out"))
OUT.mkdir(parents=True, exist_ok=True)
pynvml.nvmlInit()
H = pynvml.nvmlDeviceGetHandleByIndex(0)
T0 = time.perf_counter()
samples, marks, stop = [], [], threading.Event()


def now():
    return time.perf_counter() - T0


def sample():
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons",
                      pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)
    while not stop.is_set():
        samples.append((now(), pynvml.nvmlDeviceGetClockInfo(H, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(H) / 1e3, int(reasons(H))))
        time.sleep(0.002)


def mark(name):
    torch.cuda.synchronize()
    marks.append((now(), name))
    print(f"{now():8.2f} s  {name}", flush=True)


def timed_calls(fn, seconds=None, count=None, idle_s=0.0, duty=False):
    """Each call's (start offset s, device time s); back to back unless idle_s/duty."""
    res = []
    t_end = now() + (seconds or 1e9)
    i = 0
    while now() < t_end and (count is None or i < count):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = now()
        a.record()
        fn()
        b.record()
        if duty or idle_s or len(res) % 8 == 7:
            b.synchronize()
        res.append((t, a, b))
        i += 1
        if duty:
            time.sleep(a.elapsed_time(b) / 1e3)
        elif idle_s:
            time.sleep(idle_s)
    torch.cuda.synchronize()
    return [(t, a.elapsed_time(b) / 1e3) for t, a, b in res]


th = threading.Thread(target=sample, daemon=True)
th.start()
result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
          "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(H) / 1e3,
          "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(H, pynvml.NVML_CLOCK_SM),
          "date": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": {}}

# (1) a large GEMM, the 8B FFN up projection at 32k tokens' tile of 8192 rows (not with SKIP_GEMM=1)
def gemm_runs():
    M, N, K = 8192, 14336, 4096
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    torch.mm(a, w, out=c)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        torch.mm(a, w, out=c)
    for _ in range(20):
        g.replay()
    time.sleep(2.0)
    mark("gemm sustained")
    result["runs"]["gemm_sustained"] = timed_calls(g.replay, seconds=2.0)
    mark("gemm idle")
    time.sleep(2.0)
    mark("gemm duty")
    result["runs"]["gemm_duty"] = timed_calls(g.replay, count=200, duty=True)
    mark("gemm done")
    result["gemm"] = {"M": M, "N": N, "K": K, "flop": 2 * M * N * K}
    del a, w, c, g
    torch.cuda.empty_cache()


if not os.environ.get("SKIP_GEMM"):
    gemm_runs()

# (2) the development set's long prefills (design, batch, prompt)
# PREFILLS="name:preset:batch:prompt,...": other designs (cudagraph mode)
DESIGNS = ([(n, p, int(b), int(t), "cudagraph") for n, p, b, t in
            (x.split(":") for x in os.environ["PREFILLS"].split(","))]
           if os.environ.get("PREFILLS") else
           [("l1b_b8_p4096", "llama3_2_1b", 8, 4096, "cudagraph"),
            ("l8b_b8_p4096", "llama3_1_8b", 8, 4096, "cudagraph")])
for name, preset, B, T, mode in DESIGNS:
    cfg = ModelConfig.from_name(preset).resolved("cuda")
    model = Transformer.build(cfg, "cuda", seed=0)
    gen = Generator(model, B, T + 1, mode)
    prompt = torch.randint(0, cfg.vocab_size, (B, T), device="cuda")
    for _ in range(2):
        gen.prefill(prompt)
    time.sleep(2.0)
    mark(f"{name} sustained")
    result["runs"][f"{name}_sustained"] = timed_calls(lambda g=gen, p=prompt: g.prefill(p),
                                                      count=10)
    mark(f"{name} spaced")
    result["runs"][f"{name}_spaced"] = timed_calls(lambda g=gen, p=prompt: g.prefill(p),
                                                   count=5, idle_s=1.5)
    mark(f"{name} done")
    result[name] = {"prefill_mode": gen.prefill_mode}
    del model, gen
    torch.cuda.empty_cache()

stop.set()
th.join()
result["samples"] = samples
result["marks"] = marks
(OUT / "power_probe.json").write_text(json.dumps(result))
for k, v in result["runs"].items():
    ts = sorted(x[1] for x in v)
    print(f"{k:28s} n={len(ts):4d} median {1e3 * ts[len(ts) // 2]:9.3f} ms  min "
          f"{1e3 * ts[0]:9.3f}  first {1e3 * v[0][1]:9.3f}  last {1e3 * v[-1][1]:9.3f}")
