"""Each module's kernel time in a measured step beside the price the performance model gives it
(offline, no GPU): a validation run's table (``{stage}_pred_ms_<module>``, the calibrated prices,
each module's inter-kernel gaps already booked as ``launch_overhead``) joined by pair name with
``modules_probe.py``'s per-module kernel times (``{stage}_meas_ms_<module>``: the graph replay's
kernel durations under torch.profiler). Finds which modules a stage's over- or under-prediction
sits in.

    python bench/reference/modules_vs_price.py RUN/development.csv RUN/modules_probe.json [--stage decode]

Prints a markdown table: per pair, each module's price / measured kernel time (ratio), the
measured stage time, its kernels' sum and the rest (gaps and host time, against the predicted
``launch_overhead``), and per module the median ratio over the pairs.
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sweep.common.row import TIME, meas_module, pred, pred_module  # noqa: E402
from zoo.counts import MODULES  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table")
    ap.add_argument("probe")
    ap.add_argument("--stage", default="decode", choices=sorted(TIME))
    a = ap.parse_args()
    st = a.stage
    df = pd.read_csv(a.table).set_index("name")
    probe = json.loads(Path(a.probe).read_text())
    head = ["pair", "mode", *MODULES, "stage ms", "kernels ms", "rest ms (pred. overhead)", "error"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    ratios: dict = {m: [] for m in MODULES}
    for name, meas in probe.items():
        if name not in df.index or "fail_reason" in meas:
            continue
        r = df.loc[name]
        cells = [name, str(r.get("mode", ""))]
        for m in MODULES:
            p, q = r.get(pred_module(st, m), math.nan), meas.get(meas_module(st, m), math.nan)
            ok = q and q > 0 and p == p
            cells.append(f"{p:.3f}/{q:.3f} ({p / q:.2f})" if ok else f"{p:.3f}/{q}")
            if ok and q > 0.02 * r[TIME[st]]:  # modules of at least 2% of the stage
                ratios[m].append(p / q)
        kern = meas.get(f"{st}_meas_kernel_ms", math.nan)
        t = r[TIME[st]]
        over = r.get(pred_module(st, "launch_overhead"), math.nan)
        err = 100 * (r[pred(st, "calibrated")] / t - 1)
        cells += [f"{t:.3f}", f"{kern:.3f}", f"{t - kern:.3f} ({over:.3f})", f"{err:+.1f}%"]
        print("| " + " | ".join(cells) + " |")
    print("\n| module | median price / measured | pairs (>= 2% of the stage) |\n|---|---:|---:|")
    for m, v in ratios.items():
        if v:
            print(f"| {m} | {statistics.median(v):.3f} | {len(v)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
