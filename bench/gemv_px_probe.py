"""Does the dot-path GEMV (2-16 rows) gain from loading its activation tiles a step ahead?

    python -m bench.gemv_px_probe OUT_DIR [ROUNDS]

``kernels.gemv``'s ``PREFETCH_X`` (the next K step's activation tiles, x with the residual and
norm weight, or gate and up, loaded a step ahead by hand) is in the one-row path's autotune space
only; on the dot path each K step's prologue may wait for its activations' L2 round trip unless
Triton's pipeliner already loads them ahead. Here every dot-path GEMV runs its shipped tile
(``kernels.tuning``'s choice) with ``PREFETCH_X`` set, by prologue (``px_all``; ``px_swiglu``:
the MLP's w2 only; ``px_norm``: qkv and w13 only); nothing shipped changes.

- ``kernels.csv``: each batch-8 GEMV of the main job's MQA design and of Llama-3.1-8B, the shipped
  tile with and without, timed cold in a CUDA graph (``kernels.graph_timing.time_ms``), outputs
  compared bit for bit (the same products in the same order).
- ``step.csv``: the decode step of the main job's designs (n_kv_heads 1, 2, 8, 32 at batch 8 x 4k)
  and Llama-3.1-8B at batch 8 x 512 under each variant, ms (``bench.l2_prefetch_probe.compare``:
  CUDA graph, greedy, median over ``ROUNDS`` rounds of 64 steps, variants alternating).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

from bench.gpu import write_rows
from kernels import tuning

VARIANTS = {"base": (), "px_all": (0, 1, 2), "px_swiglu": (2,), "px_norm": (1,)}
STATE = {"px": (), "seen": None}
_LOOKUP = tuning.lookup


def _lookup(kernel, key, device):
    """The shipped choice, with ``PREFETCH_X`` on for a dot-path GEMV (``key``: the path, then
    ``(PROLOGUE, has_res, has_bias, N, K)``) of a prologue in ``STATE['px']``."""
    got = _LOOKUP(kernel, key, device)
    if kernel == "gemv" and isinstance(got, dict) and key[0] > 1:
        STATE["seen"] = dict(got)
        if key[6] in STATE["px"]:
            got = dict(got, PREFETCH_X=1)
    return got


SHAPES = [  # name, M, N, K, prologue
    ("mqa_qkv", 8, 2176, 2048, "norm+res"), ("mqa_out", 8, 2048, 2048, "none"),
    ("1b_w13", 8, 16384, 2048, "norm+res"), ("1b_w2", 8, 2048, 8192, "swiglu"),
    ("8b_qkv", 8, 6144, 4096, "norm+res"), ("8b_w2", 8, 4096, 14336, "swiglu"),
]


def kernels_table(path: str) -> None:
    from bench.gemv_tiles_probe import shape_runner
    from kernels.graph_timing import time_ms

    rows = []
    for name, M, N, K, pro in SHAPES:
        run = shape_runner(M, N, K, pro)
        STATE["px"], STATE["seen"] = (), None
        run()  # the shipped (or, for a shape without one, autotuned) tile, noted by _lookup
        torch.cuda.synchronize()
        cfg = STATE["seen"] or {}
        row = {"shape": name, "M": M, "N": N, "K": K, "prologue": pro,
               "weight_MB": round(N * K * 2 / 1e6, 1), "tile": str(cfg)}
        if cfg:
            off, on = dict(cfg, PREFETCH_X=0), dict(cfg, PREFETCH_X=1)
            row["identical"] = bool(torch.equal(run(off), run(on)))
            row["us_shipped"] = round(time_ms(functools.partial(run, off), cold=True) * 1e3, 2)
            row["us_px"] = round(time_ms(functools.partial(run, on), cold=True) * 1e3, 2)
            row["gain_pct"] = round(100 * (row["us_shipped"] / row["us_px"] - 1), 2)
        rows.append(row)
        print(row, flush=True)
        write_rows(path, rows)


def main(out_dir: str, rounds: int = 3) -> None:
    from bench.l2_prefetch_probe import DESIGNS, compare

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tuning.lookup = _lookup
    try:
        kernels_table(str(out / "kernels.csv"))

        def apply(v):
            STATE["px"] = VARIANTS[v]

        designs = [d for d in DESIGNS if d[0] in ("g32_b8_4k", "g16_b8_4k", "g4_b8_4k", "g1_b8_4k",
                                                  "8b_b8_512")]
        compare(designs, VARIANTS, apply, str(out / "step.csv"), rounds)
    finally:
        tuning.lookup, STATE["px"] = _LOOKUP, ()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
