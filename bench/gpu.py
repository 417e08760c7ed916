"""What a GPU probe of ``bench/`` starts from: its output folder (the first argument, default
``out``), the calibration's timer (``sweep.measure.microbench.timer``: CUDA graphs of back-to-back
calls, medians of ``reps``) and seeded random CUDA tensors."""

from __future__ import annotations

import sys
from pathlib import Path


def setup(reps: int):
    """``(out, tm, rnd)``: the folder made, the timer, and ``rnd(*shape, dt=bf16)``."""
    import torch

    from sweep.measure import microbench as mb

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*s, dt=torch.bfloat16):
        return torch.randn(*s, device="cuda", dtype=dt, generator=g)

    return out, mb.timer(True, reps), rnd


def write_rows(path, rows: list[dict]) -> None:
    """``rows`` as a CSV table at ``path``: one column per key, in the order keys first appear
    over the rows (a key a row lacks is left empty); nothing written for no rows."""
    import csv

    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
