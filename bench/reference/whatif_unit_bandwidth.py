"""A variant of the public-figures check (issue 25), not adopted: each chip priced from a
third-party measured bandwidth of the unit that decodes where one was found, from the
datasheet elsewhere. Prints the leave-one-chip-out decode summary both ways (rows, median and p90
abs. error %, rows past 35%). CPU only, a few seconds:

    python bench/reference/whatif_unit_bandwidth.py

The figures (GB/s), each as read in its source (2026-11-26):
- chsasank/device-benchmarks README, a PyTorch ``a.copy_(b)`` (2 x bytes / time): M2 CPU 60,
  M2 Ultra CPU 311 / GPU 636, M3 Max GPU 318, A100 80GB 1490, RTX 4090 912.
- ProjectPhysX/FluidX3D README, single-device table (MLUPs/s x 153 bytes per cell): M1 Max GPU
  362, M1 Ultra GPU 691, M2 Pro GPU 183, RTX 3090 Ti 875 (here 860: mli/transformers-benchmarks
  micro_bench.ipynb, an elementwise op on a 3090 Ti).
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from sweep.analysis import public as P  # noqa: E402

MEASURED = {"Apple M1 Max (24-core GPU)": 362, "Apple M1 Max (32-core GPU)": 362,
            "Apple M1 Max (GPU cores not stated)": 362, "Apple M1 Ultra (64-core GPU)": 691,
            "Apple M2 (8-core CPU)": 60, "Apple M2 Pro (19-core GPU)": 183,
            "Apple M2 Pro (GPU cores not stated)": 183, "Apple M2 Ultra (24-core CPU)": 311,
            "Apple M2 Ultra (76-core GPU)": 636, "Apple M2 Ultra (GPU cores not stated)": 636,
            "Apple M3 Max (40-core GPU)": 318, "NVIDIA A100 SXM4 80GB": 1490,
            "NVIDIA GeForce RTX 4090": 912, "NVIDIA GeForce RTX 3090 Ti": 860}


def summary(rows, chips, models) -> str:
    t = P.check(rows, chips, models)
    e = np.array([abs(r["err_loo_pct"]) for r in t
                  if r["stage"] == "decode" and math.isfinite(r["err_loo_pct"])])
    return (f"{len(e)} rows, median {np.median(e):.1f}%, p90 {np.percentile(e, 90):.1f}%, "
            f"{int((e > 35).sum())} past 35%")


def main() -> int:
    rows, chips, models = P.load()
    print("datasheet bandwidth:        ", summary(rows, chips, models))
    unit = {k: dict(v) for k, v in chips.items()}
    for k, v in MEASURED.items():
        unit[k]["memory_bandwidth_gb_s"] = str(v)
    print("measured where one was found:", summary(rows, unit, models))
    return 0


if __name__ == "__main__":
    sys.exit(main())
