"""A one-byte KV cache's tiles widened to fp16 in registers before their trip through shared
memory (``kernels.decode_attention.WIDEN``), against the shipped path, where Triton moves the
widening after it: the int8 / fp8 tile read from shared memory by narrow loads (110 ``LDS`` a
program against bf16's 16 ``LDSM``; ``results/reference/decode_levers_h100.md`` section 15).

    python -m bench.widen_probe kernels OUT_DIR   # the one-byte shapes x fixed tile, both ways
    python -m bench.widen_probe step OUT_DIR      # the kv-dominated decode step, both ways

As ``bench.kv_ahead_probe`` (its ``cmd_kernels`` and ``cmd_step`` with the flag ``WIDEN``; the
step one round), on the one-byte shapes; the bf16 step once, the ratios' base.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.kv_ahead_probe import cmd_kernels, cmd_step

SHAPES = ("b64_8k_int8", "b64_8k_fp8", "flagship_g4_int8", "flagship_g32_int8")
TILES_8 = [dict(BLOCK_N=n, num_warps=w, num_stages=s)
           for n, w, s in ((64, 4, 2), (128, 4, 2), (128, 4, 3), (256, 8, 2))]

if __name__ == "__main__":
    dest = Path(sys.argv[2])
    dest.mkdir(parents=True, exist_ok=True)
    if sys.argv[1] == "kernels":
        cmd_kernels(dest, "WIDEN", SHAPES, TILES_8)
    else:
        cmd_step(dest, "WIDEN", ("int8", "fp8_e4m3"), rounds=1)
