"""Decode attention as the tree's code stands, per fixed tile: one side of an A/B of a kernel
change, the patch applied between two runs on the same machine (``bench/reference/run_attn_ab.sh``
alternates them, twice each way).

    python -m bench.attn_ab_probe OUT_DIR TAG   # OUT_DIR/kernels_TAG.csv (GPU)

Each call timed as ``bench.attention_probe.time_shape`` times it (RoPE and the cache write
folded, PDL, float32 partials, the merge under PDL, the tree's split plan: ``PER_SM`` for bf16,
``PER_SM_Q`` for one-byte caches), each in a CUDA graph over enough layers' caches to leave L2
cold; ``frac_copy`` of the copy rate measured in the same process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from bench import attention_probe as ap
from bench.gpu import write_rows
from bench.kv_ahead_probe import _copy
from kernels import switches

SHAPES = ("b64_8k_int8", "b64_8k_fp8", "b64_8k_bf16", "flagship_g4_int8", "flagship_g32")
TILES_Q = [dict(BLOCK_N=n, num_warps=4, num_stages=s) for n, s in ((128, 2), (128, 3), (64, 3))]
TILES_16 = [dict(BLOCK_N=n, num_warps=4, num_stages=s) for n, s in ((64, 2), (64, 3))]


def main(out: Path, tag: str) -> None:
    """Every shape x tile once; ``kernels_{tag}.csv`` in ``out``."""
    switches.set_current(switches.Switches(autotune=False))
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy = _copy()
    rows = []
    for name in SHAPES:
        shape = next(s for s in ap.SHAPES if s[0] == name)
        for tile in TILES_Q if shape[6] != "bf16" else TILES_16:
            r = dict(ap.time_at_tile(shape, tile, "f32_pdl", l2, copy), tag=tag)
            rows.append(r)
            print(",".join(str(r[k]) for k in ("tag", "shape", "tile", "us", "frac_copy",
                                               "max_abs_err")), flush=True)
            write_rows(out / f"kernels_{tag}.csv", rows)
    print(f"copy {copy / 1e9:.1f} GB/s; {torch.cuda.get_device_name()}", flush=True)


if __name__ == "__main__":
    dest = Path(sys.argv[1])
    dest.mkdir(parents=True, exist_ok=True)
    main(dest, sys.argv[2])
