"""Decode attention over a long cache cut into more splits: the split plan's programs per SM
(``kernels.decode_attention.PER_SM`` for bf16, shipped 2; for one-byte caches the plan aims at
one wave, ``PER_SM_Q``, section 19 of decode_levers_h100.md) at fixed aims, per fixed tile.

    python -m bench.splits_probe OUT_DIR        # 2 / 8 / 16 a SM over the b64 x 8k shapes (GPU)
    python -m bench.splits_probe OUT_DIR plan   # 2 / 4 / 8 / 16 over the one-byte shapes of the
                                                # shipped experiments (PLAN_SHAPES), the tiles
                                                # the tuner picks for them (PLAN_TILES)

kernels.csv: each shape x programs a SM x tile, two rounds.

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
# The split plan of 16 a SM (2026-12-07, before the one-wave rule) was chosen on the shapes
# above; the shipped calibration measured after it (reship_h100/2026-12-07-s32) against before
# (2026-12-06) puts MHA at batch 8 (int8 +6.6%, fp8 +2.9%) and G 4 at head_dim 128 (int8 +17.7%,
# fp8 +9.8%) slower. ``plan``:
# the shipped experiments' one-byte shapes (batch 8, prompt 4096 + 64; name, B, H, Hkv, D,
# capacity, kv_dtype as ``attention_probe.SHAPES``; G 16 and 32 take 17 splits of 256 positions
# whatever the aim, so they are left out), at the two tiles the H100's tuner picks for one-byte
# caches (14 of 14 shipped choices: n128 w4 s2 / s3)
PLAN_SHAPES = [(f"b8_g{32 // h}{'_d128' if d == 128 else ''}_{kv.split('_')[0]}", 8, 32, h, d,
                4160, kv) for kv in ("int8", "fp8_e4m3") for h, d in ((8, 64), (32, 64), (8, 128))
               ] + [("b8_g2_int8", 8, 32, 16, 64, 4160, "int8")] + [
    s for s in ap.SHAPES if s[0] in ("b64_8k_int8", "b64_8k_fp8")]
PLAN_PER_SM = (2, 4, 8, 16)
PLAN_TILES = [dict(BLOCK_N=128, num_warps=4, num_stages=s) for s in (2, 3)]


def main(out: Path, plan: bool = False) -> None:
    """Every shape x programs a SM x tile, two rounds; ``kernels.csv`` in ``out``. ``plan``:
    ``PLAN_SHAPES`` x ``PLAN_PER_SM`` x ``PLAN_TILES``."""
    switches.set_current(switches.Switches(autotune=False))
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy = _copy()
    per_sms = PLAN_PER_SM if plan else PER_SM
    for per_sm in per_sms:
        ap.LEVERS[f"f32_pdl_sm{per_sm}"] = (per_sm, False, True, True)
    shapes = PLAN_SHAPES if plan else [next(s for s in ap.SHAPES if s[0] == n) for n in SHAPES]
    rows = []
    for shape in shapes:
        for rnd in range(2):
            tiles = PLAN_TILES if plan else TILES_8 if shape[6] != "bf16" else TILES_16
            for tile in tiles:
                for per_sm in per_sms:
                    da.PER_SM_Q, da.PER_SM_FILL = 0, per_sm  # one-byte caches: per_sm a SM too
                    r = ap.time_at_tile(shape, tile, f"f32_pdl_sm{per_sm}", l2, copy)
                    n_splits = da.plan(shape[1], shape[3], shape[2] // shape[3], shape[4], shape[5],
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
    main(dest, plan=sys.argv[2:] == ["plan"])
