"""Hardware specs (datasheet peaks from ``conf/hardware/*.yaml``) and measured ceilings.

Every MFU and MBU is reported twice: against the datasheet peak of the spec, and against the
ceiling measured on this device by ``measure_ceilings`` (a large device-to-device copy for
bandwidth, counting bytes read plus bytes written; a large GEMM per dtype for FLOP/s). The measured
ceilings run once per device in a child process and are cached in
``results/ceilings/<device>.json``.

Usage: ``python -m sweep.analysis.hardware`` prints the spec and the (measured or cached) ceilings.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..env import REPO, environment, slug

HW_DIR = REPO / "conf" / "hardware"
CEILINGS_DIR = REPO / "results" / "ceilings"
DTYPE_PEAK_KEY = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}


@dataclass
class HardwareSpec:
    """Datasheet figures of one device. Units: TFLOP/s (dense; int8/int4 in TOP/s), GB/s (1e9
    bytes/s), GB, MB, W.

    ``kind`` is ``gpu``, ``cpu`` or ``npu``; ``unified_memory`` where the device shares the host's
    memory (``memory_gb`` then is the largest configuration). ``source`` and ``date`` say where
    each figure comes from; ``estimates`` names the fields that are not vendor figures (derived
    from cores x lanes x clock, or reported by third parties: see ``source``). ``assumptions``
    holds what the performance model needs for a chip it has no calibration of:
    ``compute_efficiency`` and ``bandwidth_efficiency`` (achievable fraction of the peaks for large
    GEMMs and streaming reads), ``launch_us`` (fixed cost per kernel or op), and ``basis`` (where
    each comes from)."""

    name: str
    display: str = ""
    match: list = field(default_factory=list)
    source: str = ""
    peak_tflops: dict = field(default_factory=dict)
    hbm_gb_s: float = math.nan
    memory_gb: float = math.nan
    l2_mb: float = math.nan
    sm_count: int = 0
    tdp_w: float = math.nan
    kind: str = "gpu"
    vendor: str = "NVIDIA"
    date: str = ""
    unified_memory: bool = False
    estimates: list = field(default_factory=list)
    assumptions: dict = field(default_factory=dict)

    def peak_flops(self, dtype: str) -> float:
        """Dense matmul peak for a model dtype in FLOP/s (NaN where the datasheet has none).

        fp32 models are counted against the plain fp32 peak: the zoo leaves TF32 off.
        """
        return float(self.peak_tflops.get(DTYPE_PEAK_KEY.get(dtype, dtype), math.nan)) * 1e12

    @property
    def peak_bytes_s(self) -> float:
        """Datasheet DRAM bandwidth in bytes/s."""
        return float(self.hbm_gb_s) * 1e9


def available() -> list[str]:
    """Names of the shipped specs."""
    return sorted(p.stem for p in HW_DIR.glob("*.yaml") if p.stem != "auto")


def load_spec(name: str, device_name: str | None = None) -> HardwareSpec:
    """Load spec ``name``; ``auto`` matches ``device_name`` against each spec's ``match`` patterns.

    Raises:
        KeyError: unknown name, or no spec matches the device (the message lists the specs).
    """
    if name == "auto":
        if device_name is None:
            raise KeyError("hardware=auto needs a device name")
        for n in available():
            spec = load_spec(n)
            if any(re.search(p, device_name) for p in spec.match):
                return spec
        raise KeyError(f"no hardware spec matches device {device_name!r}; add one to "
                       f"conf/hardware/ or pick one of: {', '.join(available())}")
    path = HW_DIR / f"{name}.yaml"
    if not path.exists():
        raise KeyError(f"unknown hardware spec {name!r}; known: {', '.join(available())}")
    return HardwareSpec(**yaml.safe_load(path.read_text()))


# ---- measured ceilings (run in a child process) ---------------------------------------------

def _measure(device: str) -> dict:

    from ..measure.timing import Timer

    timer = Timer(device)
    out: dict = {"method": {}}
    if device == "cuda":
        n_copy, gemm = 1 << 30, {"bf16": 8192, "fp16": 8192, "fp32": 8192}
    else:
        n_copy, gemm = 1 << 26, {"fp32": 1024}
    out.update(_copy_rate(timer, n_copy, device))
    out["method"]["copy"] = f"dst.copy_(src) of {n_copy} bytes; read + write counted; median of 30"
    for dt, n in gemm.items():
        out.update(_gemm_rate(timer, n, dt, device))
        out["method"][f"gemm_{dt}"] = f"{n}x{n}x{n} matmul of random data; median of repeats"
    return out


def _copy_rate(timer, n_bytes: int, device: str) -> dict:
    import torch

    src = torch.randn(n_bytes // 4, device=device)  # float32 elements: n_bytes bytes
    dst = torch.empty_like(src)
    ts = timer.repeat(lambda: dst.copy_(src), warmup=5, repeats=30)
    return {"copy_bytes_s": 2 * n_bytes / statistics.median(ts),
            "copy_bytes_s_spread": [2 * n_bytes / max(ts), 2 * n_bytes / min(ts)]}


def _gemm_rate(timer, n: int, dt: str, device: str) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dt]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    ts = timer.repeat(lambda: a @ b, warmup=3, repeats=10 if device == "cuda" else 5)
    return {f"gemm_flops_{dt}": 2 * n**3 / statistics.median(ts),
            f"gemm_flops_{dt}_spread": [2 * n**3 / max(ts), 2 * n**3 / min(ts)]}


def measure_ceilings(device: dict, refresh: bool = False, timeout_s: float = 300) -> dict:
    """Measured copy bandwidth (bytes/s) and GEMM rates (FLOP/s per dtype) of ``device``, cached.

    Runs ``python -m sweep.analysis.hardware --measure`` in a child process the first time for a device
    (no CUDA context in the caller) and caches the JSON in ``results/ceilings/<device>.json``.

    Returns:
        ``{"copy_bytes_s", "gemm_flops_<dtype>", ..., "env": {...}}``; ``{"error": reason}`` if the
        measurement failed, so figures against it become NaN with that reason.
    """
    path = CEILINGS_DIR / f"{slug(device['name'])}.json"
    if path.exists() and not refresh:
        return json.loads(path.read_text())
    CEILINGS_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    cmd = [sys.executable, "-m", "sweep.analysis.hardware", "--measure", str(tmp), "--device",
           device["type"]]
    try:
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                               filter(None, [os.environ.get("PYTHONPATH"), str(REPO)]))))
    except subprocess.TimeoutExpired:
        return {"error": f"ceilings measurement timed out after {timeout_s} s"}
    if r.returncode != 0 or not tmp.exists():
        return {"error": f"ceilings measurement failed: {r.stderr.strip()[-500:]}"}
    os.replace(tmp, path)
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measure", help="(child) measure and write JSON here")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--refresh", action="store_true", help="measure again even if cached")
    a = ap.parse_args(argv)
    from ..env import detect_device

    dev = detect_device("cuda" if a.device == "cuda" else a.device)
    if a.measure:
        res = _measure(dev["type"])
        res["env"] = environment(dev)
        Path(a.measure).write_text(json.dumps(res, indent=2))
        return 0
    spec = load_spec("auto", dev["name"])
    print(json.dumps({"device": dev["name"], "spec": spec.__dict__,
                      "ceilings": measure_ceilings(dev, refresh=a.refresh)}, indent=2,
                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
