"""The MLA decode kernel's tiles and split length on the GPU (issue 39): each ``(BLOCK_H, BLOCK_N,
warps, stages)`` of ``CANDIDATES`` with a split of at least ``min_tiles`` tiles, at DeepSeek's
latent (512 + a 64-wide RoPE key) and 16 / 128 heads, batch 1 and 8, 4k and 32k positions; each
call cold (the caches rotated through copies, ``sweep.measure.microbench``), the median of 7
graph replays. ``of_roofline``: the latents' and keys' bytes over the copy bandwidth measured
here, over the time.

    python -m bench.mla_tiles_probe OUT_DIR [--swapped | --shipped]  # mla_tiles.{json,md}
    (--swapped: the shipped tile against the transposed products', ``SWAPPED``, splits of 4 / 8;
    --shipped: the tile and split ``kernels.mla_decode`` picks at each shape)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SHAPES = [(16, 1, 4096), (16, 1, 32768), (16, 8, 4096), (16, 8, 32768), (128, 1, 32768),
          (128, 8, 4096)]
CANDIDATES = [(16, 32, 4, 2), (16, 32, 4, 3), (16, 32, 8, 2), (16, 64, 8, 2), (16, 16, 4, 2)]
# the products transposed (positions, then latent channels, in the tensor core's M): a fifth
# element True (kernels.mla_decode.mla_decode's ``tile``)
SWAPPED = [(16, 64, 4, 2, True), (16, 64, 4, 3, True), (16, 128, 4, 2, True),
           (16, 64, 8, 2, True), (16, 128, 8, 2, True), (32, 64, 4, 2, True),
           (16, 32, 4, 3, True)]
MIN_TILES = (4, 8, 16, 32)


def main(argv=None) -> int:
    import torch

    import kernels.mla_decode as K_
    from kernels.mla_decode import mla_decode
    from sweep.measure import microbench as mb
    from sweep.measure.ceilings import copy_rate

    argv = sys.argv[1:] if argv is None else argv
    swapped = "--swapped" in argv  # the shipped tile against the transposed ones only
    shipped = "--shipped" in argv  # the tile kernels.mla_decode.tiles picks, its splits
    argv = [a for a in argv if a not in ("--swapped", "--shipped")]
    candidates = [(16, 32, 4, 3)] + SWAPPED if swapped else CANDIDATES
    min_tiles = (4, 8) if swapped else (K_.MIN_TILES,) if shipped else MIN_TILES
    out = Path(argv[0] if argv else "out")
    out.mkdir(parents=True, exist_ok=True)
    bw = copy_rate("cuda")["copy_bytes_s"]
    tm = mb.timer(True, 7)
    g = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16
    rows = []
    for H, B, S in SHAPES:
        nbytes = 2.0 * B * S * (512 + 64)
        q = torch.randn(B, H, 512, device="cuda", dtype=bf, generator=g)
        qp = torch.randn(B, H, 64, device="cuda", dtype=bf, generator=g)
        caches = [(torch.randn(B, S, 512, device="cuda", dtype=bf, generator=g),
                   torch.randn(B, S, 64, device="cuda", dtype=bf, generator=g))
                  for _ in range(mb.cold_copies(nbytes, True, cap=16))]
        pos = torch.tensor([S - 1], device="cuda")
        for tile in [K_.tiles(512, H)] if shipped else candidates:
            for mt in min_tiles:
                try:
                    sp = tm([lambda c=c, t=tile, m=mt, a=(q, qp, pos): mla_decode(
                        *a[:2], *c, a[2], 0.07, tile=t, out_dtype=bf, min_tiles=m)
                        for c in caches])
                    us = sp["median"] * 1e6
                    rows.append({"H": H, "B": B, "S": S, "tile": list(tile), "min_tiles": mt,
                                 "us": us, "of_roofline": nbytes / bw / (us * 1e-6)})
                except Exception as e:  # a tile that does not compile here: say so, go on
                    rows.append({"H": H, "B": B, "S": S, "tile": list(tile), "min_tiles": mt,
                                 "error": str(e)[:200]})
                print(json.dumps(rows[-1]), flush=True)
        del caches
        torch.cuda.empty_cache()
    (out / "mla_tiles.json").write_text(json.dumps({"copy_bytes_s": bw, "rows": rows}, indent=1))
    ref = "shipped" if shipped else f"{candidates[0]} x {min_tiles[0]}"
    lines = [f"copy bandwidth {bw / 1e12:.2f} TB/s", "",
             f"| H | B | S | best tile | min_tiles | us | of roofline | {ref} us |",
             "|---:|---:|---:|---|---:|---:|---:|---:|"]
    for H, B, S in SHAPES:
        ok = [r for r in rows if (r["H"], r["B"], r["S"]) == (H, B, S) and "us" in r]
        if not ok:
            continue
        best = min(ok, key=lambda r: r["us"])
        first = list(K_.tiles(512, H)) if shipped else list(candidates[0])
        base = next((r["us"] for r in ok if r["tile"] == first
                     and r["min_tiles"] == min_tiles[0]), float("nan"))
        lines.append(f"| {H} | {B} | {S} | {tuple(best['tile'])} | {best['min_tiles']} | "
                     f"{best['us']:.1f} | {best['of_roofline']:.2f} | {base:.1f} |")
    (out / "mla_tiles.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
