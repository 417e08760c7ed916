"""The idle time between kernels of a graphed step on this GPU, three times: ``graph_gap`` as the
calibration measures it (``sweep.measure.fixed_costs.graph_gap_of``: one-block kernels repeated)
and ``graph_gap_mixed``, between the zoo's one-row GEMV (2048 x 2048) and its RMSNorm kernel
alternating, each reading the other's output (hundreds of programs each). On an H200: 0.08 and
0.12 us, so the 0.7-1.3 us per launch that small designs' graphed steps hold beyond their
kernels is not this gap (results/reference/heldout_h200/2026-11-25/probes/gap_probe.json).

    python3 bench/reference/gap_probe.py OUT.json
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sweep.common.env import detect_device, environment  # noqa: E402
from sweep.measure import fixed_costs  # noqa: E402


def mixed_gap(d: int = 2048) -> float | None:
    """``graph_gap_of`` (s) of the GEMV and RMSNorm alternating, 100 pairs."""
    import torch

    from kernels import switches
    from kernels.gemv import gemv
    from kernels.rmsnorm import rmsnorm

    w = torch.randn(d, d, device="cuda", dtype=torch.bfloat16) / d**0.5
    nw = torch.ones(d, device="cuda", dtype=torch.bfloat16)
    h = [torch.randn(1, d, device="cuda", dtype=torch.bfloat16)]

    def step():
        h[0] = rmsnorm(gemv(h[0], w), nw, 1e-5)

    with switches.use(autotune=False):
        step()
        torch.cuda.synchronize()
        return fixed_costs.graph_gap_of(step, n=100, per=2)


def main() -> int:
    import torch

    dev = detect_device("cuda")
    x = torch.zeros(16, device="cuda")
    runs = [{"graph_gap": fixed_costs.graph_gap_of(lambda: x.add_(1)),
             "graph_gap_mixed": mixed_gap()} for _ in range(3)]
    out = {"env": environment(dev), "runs": runs}
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
    print(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
