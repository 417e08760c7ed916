"""Whether the fixed costs read slow on a machine that has just started: the calibration's
``launch`` group (``sweep.measure.fixed_costs.launch``) measured three times in one process:
first thing (the device and the host idle, as a fresh machine's first run meets it), again at
once, and again after ``LOAD_S`` seconds of a GEMM load on the device with the host busy issuing
it. Each reading's eager layer (torch and Triton, decode) and its eager op are printed and
written to ``OUT/fixed_costs.json``.

The held-out set's eager rows on 2026-12-07 (``results/reference/heldout_h100.md``, thirty-fourth
session): the fixed costs measured first thing on two fresh H100 machines priced an eager
Llama-3.2-1B layer at 0.905 and 1.288 ms, while those machines' trials ran at about 0.6; the
shipped ones, measured mid-reship on a warm machine, at 0.587.

    python -m bench.fixed_costs_probe OUT [LOAD_S]     # (CPU: the torch path, a smaller load)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def _load(device: str, seconds: float) -> int:
    """GEMMs on ``device`` for ``seconds`` s, issued by this host; returns how many ran."""
    import torch

    n = 8192 if device == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16 if device == "cuda" else None)
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        a @ a
        done += 1
        if device == "cuda" and done % 8 == 0:
            torch.cuda.synchronize()
    if device == "cuda":
        torch.cuda.synchronize()
    return done


def main(argv: list[str] | None = None) -> int:
    """Three readings of the ``launch`` group: cold, again, after a load. Returns 0."""
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0])
    load_s = float(argv[1]) if len(argv) > 1 else 20.0
    import torch

    from sweep.measure import fixed_costs
    from sweep.measure import microbench as mb

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tm = mb.timer(device == "cuda", 7 if device == "cuda" else 5)
    readings = []
    for when in ("cold", "again", f"after {load_s:g} s of load"):
        if when.startswith("after"):
            print(f"load: {_load(device, load_s)} GEMMs", flush=True)
        t0 = time.perf_counter()
        rows = {r["op"]: r for r in fixed_costs.launch(device, tm)}
        got = {op: rows[op]["time_s"] for op in ("eager_op", "eager_layer_torch",
                                                  "eager_layer_triton") if op in rows}
        readings.append({"when": when, "wall_s": round(time.perf_counter() - t0, 2), **got})
        print(json.dumps(readings[-1]), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fixed_costs.json").write_text(json.dumps({"device": device, "readings": readings},
                                                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
