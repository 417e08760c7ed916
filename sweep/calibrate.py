"""``python -m sweep.calibrate [--refresh] [--quick]``: calibrate the performance model on this
device: micro-benchmarks of the kernels the zoo launches, over the shapes of every shipped model
and experiment space (``sweep.analysis.calibrate``), cached in
``results/calibration/<device>.{json,parquet}``. A study runs it on first use per device."""

import argparse
import sys

from .analysis.calibrate import calibrate, paths
from .analysis.hardware import measure_ceilings
from .env import detect_device
from .space import shipped_designs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--refresh", action="store_true", help="measure again even if cached")
    ap.add_argument("--quick", action="store_true", help="the reduced grid (the CPU's)")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    a = ap.parse_args(argv)
    dev = detect_device(a.device)
    designs = shipped_designs(cpu=dev["type"] != "cuda")
    meta, table = calibrate(dev, designs, refresh=a.refresh, quick=a.quick or None,
                            ceilings=measure_ceilings(dev))
    print(f"{meta['device']}: {len(table)} entries ({meta['kinds']}), measured {meta['date']} in "
          f"{meta['wall_s']} s; {paths(dev['name'])[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
