"""Decode attention over a long cache cut into more splits: the split plan's programs per SM
(``kernels.decode_attention.PER_SM``, shipped 2) against 8 and 16, per fixed tile.

    python -m bench.splits_probe OUT_DIR   # kernels.csv: each shape x PER_SM x tile, two rounds (GPU)

At batch 64 x 8k the shipped plan gives one split per (sequence, KV head): 512 programs of 8256
positions for 132 SMs, so how many fit on an SM at once (shared memory, registers) decides
whether the last of them run alone (wave quantization). More splits make more, shorter
programs and a merge of their partials (folded into the launch, ``split_merge.fold_pays``).
Each call is timed as ``bench.attention_probe.time_shape`` times it (RoPE and the cache write
folded, PDL, float32 partials: the shipped levers); ``frac_copy`` of the copy rate measured here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from bench import attention_probe as ap
from bench.gpu import write_rows
from bench.kv_ahead_probe import _copy
from kernels import decode_attention as da
from kernels import switches

SHAPES = ("b64_8k_int8", "b64_8k_fp8", "b64_8k_bf16", "flagship_g4_int8")
PER_SM = (2, 8, 16)
# one-byte tiles, with ``maxnreg`` caps: compiled offline (Triton 3.9, sm_90a) the shipped n128 w4
# tile takes 128 (int8) / 153 (fp8) registers a thread, 4 / 3 programs a SM; n64 w4 s3 holds
# 80 with no spill (6 a SM), 64 with 4-40 bytes spilled (8 a SM)
TILES_8 = [dict(BLOCK_N=n, num_warps=4, num_stages=s, **({"maxnreg": r} if r else {}))
           for n, s, r in ((64, 3, None), (64, 3, 80), (64, 3, 64), (128, 2, None), (128, 2, 96),
                           (128, 3, None))]
TILES_16 = [dict(BLOCK_N=n, num_warps=4, num_stages=s) for n, s in ((64, 2), (64, 3))]


def main(out: Path) -> None:
    """Every shape x ``PER_SM`` x tile, two rounds; ``kernels.csv`` in ``out``."""
    switches.set_current(switches.Switches(autotune=False))
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy = _copy()
    for per_sm in PER_SM:
        ap.LEVERS[f"f32_pdl_sm{per_sm}"] = (per_sm, False, True, True)
    rows = []
    for name in SHAPES:
        shape = next(s for s in ap.SHAPES if s[0] == name)
        for rnd in range(2):
            for tile in TILES_8 if shape[6] != "bf16" else TILES_16:
                for per_sm in PER_SM:
                    r = ap.time_at_tile(shape, tile, f"f32_pdl_sm{per_sm}", l2, copy)
                    n_splits = da.plan(shape[1], shape[3], shape[2] // shape[3], shape[5],
                                       shape[6] != "bf16", da._n_sm(torch.device("cuda")))[0]
                    r.update(round=rnd, per_sm=per_sm, n_splits=n_splits)
                    rows.append(r)
                    print(",".join(str(r[k]) for k in ("shape", "tile", "per_sm", "n_splits",
                                                       "round", "us", "frac_copy",
                                                       "max_abs_err")), flush=True)
                    write_rows(out / "kernels.csv", rows)
    print(f"copy {copy / 1e9:.1f} GB/s; {torch.cuda.get_device_name()}", flush=True)


if __name__ == "__main__":
    dest = Path(sys.argv[1])
    dest.mkdir(parents=True, exist_ok=True)
    main(dest)
