"""The idle time between kernels of a graphed step on this GPU, as the calibration measures it
(``sweep.measure.fixed_costs.graph_gap``: ``graph_gap`` between one-block kernels repeated,
``graph_gap_mixed`` between the zoo's GEMV and RMSNorm kernels alternating), three times.

    python3 results/reference/gap_probe.py OUT.json
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sweep.common.env import detect_device, environment  # noqa: E402
from sweep.measure import fixed_costs  # noqa: E402


def main() -> int:
    dev = detect_device("cuda")
    runs = [{r["op"]: r["time_s"] for r in fixed_costs.graph_gap("cuda")} for _ in range(3)]
    out = {"env": environment(dev), "runs": runs}
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
    print(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
