"""The device's measured ceilings: ``python -m sweep.measure.ceilings OUT.json [--device D]``.

A large device-to-device copy for the bandwidth (bytes read plus bytes written) and a large GEMM
per dtype for the FLOP/s, in a child process of their own (``run``): the caller keeps no CUDA
context. ``sweep.analysis.hardware.measure_ceilings`` caches what this measures and gives every
MFU and MBU its "measured" peak.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from .child import ChildTimeout, launch, log_tail, progress_line


def measure(device: str) -> dict:
    """``{"copy_bytes_s", "gemm_flops_<dtype>", their ``_spread`` [min, max], "method"}`` on
    ``device`` (``cuda``: a 1 GiB copy, 8192^3 GEMMs in bf16, fp16, fp32; ``cpu``: 64 MiB,
    1024^3 fp32)."""
    from .timing import Timer

    timer = Timer(device)
    out: dict = {"method": {}}
    if device == "cuda":
        n_copy, gemm = 1 << 30, {"bf16": 8192, "fp16": 8192, "fp32": 8192}
    else:
        n_copy, gemm = 1 << 26, {"fp32": 1024}
    progress_line("phase", "measuring the copy bandwidth")
    out.update(_copy_rate(timer, n_copy, device))
    out["method"]["copy"] = f"dst.copy_(src) of {n_copy} bytes; read + write counted; median of 30"
    for dt, n in gemm.items():
        progress_line("phase", f"measuring the {dt} GEMM rate")
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


def run(device_type: str, timeout_s: float = 300.0, on_line=None) -> dict:
    """The ceilings of this machine's ``device_type`` device, measured in a child process.

    Raises:
        RuntimeError: the child failed or timed out (its log tail in the message).
    """
    with tempfile.TemporaryDirectory(prefix="designzoo-ceilings-") as d:
        out, log = Path(d) / "ceilings.json", Path(d) / "log.txt"
        cmd = [sys.executable, "-m", "sweep.measure.ceilings", str(out), "--device", device_type]
        try:
            rc = launch(cmd, log, timeout_s, on_line=on_line)
        except ChildTimeout as e:
            raise RuntimeError(f"ceilings measurement {e}") from None
        if rc != 0 or not out.exists():
            raise RuntimeError(f"ceilings measurement failed: {log_tail(log, 500)}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    import argparse

    from ..common.env import detect_device, environment
    from .child import watch_parent

    ap = argparse.ArgumentParser(description="(child) measure this device's ceilings into OUT")
    ap.add_argument("out")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    a = ap.parse_args(argv)
    watch_parent()
    dev = detect_device(a.device)
    res = measure(dev["type"])
    res["env"] = environment(dev)
    Path(a.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
