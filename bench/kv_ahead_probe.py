"""Decode attention's K and V tiles loaded a tile ahead by hand (``KV_AHEAD``), against the loop as
shipped. Refuted on the H100 (``results/reference/decode_levers_h100.md`` section 15: 2-29% slower
per call): the shipped loop's tiles are already ``cp.async`` copies pipelined by Triton. The
kernel's side of the change is not on main: apply
``results/reference/decode_levers_h100/s27_kv_ahead/kv_ahead.patch`` first (without it both ways
run the shipped kernel).

    python -m bench.kv_ahead_probe kernels OUT_DIR   # each shape x fixed tile, both ways (GPU)
    python -m bench.kv_ahead_probe step OUT_DIR      # the kv-dominated decode step, both ways

``kernels``: each shape of ``bench.attention_probe`` timed as the decode step meets it
(``time_shape``, the shipped levers: PDL, float32 partials, the shipped split plan) with each of
four fixed tiles, ``KV_AHEAD`` off and on, variants alternating, two rounds; the output's error
against SDPA kept. ``step``: ``sweep.measure.benchmark.zoo_case`` on the Llama-3.2-1B shape at
batch 64 x 8k (the ``kv`` group of ``sweep.cli.bench``: bf16, int8, fp8 caches), the autotuner
choosing tiles for each way on first use (the change alters the kernel's fingerprint, so both
tune here), two rounds alternating. Columns as ``bench.attention_probe``; ``frac_copy`` of the copy
bandwidth measured in the same process.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from bench import attention_probe as ap
from bench.gpu import write_rows
from kernels import decode_attention as da
from kernels import switches

SHAPES = ("b64_8k_bf16", "b64_8k_int8", "b64_8k_fp8", "flagship_g4_int8", "flagship_g4",
          "flagship_g1", "8b_b8", "1b_b1", "flagship_g32")
TILES_16 = [dict(BLOCK_N=n, num_warps=4, num_stages=s) for n, s in ((64, 2), (64, 3), (128, 2))]
TILES_8 = [dict(BLOCK_N=n, num_warps=w, num_stages=2) for n, w in ((128, 4), (256, 4), (256, 8))]


def _copy() -> float:
    from sweep.measure.ceilings import _copy_rate
    from sweep.measure.timing import Timer

    return _copy_rate(Timer("cuda"), 1 << 30, "cuda")["copy_bytes_s"]


def cmd_kernels(out: Path, flag: str = "KV_AHEAD", shapes=SHAPES, tiles_8=TILES_8) -> None:
    """Each of ``shapes`` x fixed tile, ``kernels.decode_attention``'s module flag ``flag`` off
    and on (column ``ahead``), two rounds; ``kernels.csv`` in ``out``."""
    switches.set_current(switches.Switches(autotune=False))
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy = _copy()
    rows = []
    for shape in sorted((s for s in ap.SHAPES if s[0] in shapes),
                        key=lambda s: shapes.index(s[0])):
        tiles = tiles_8 if shape[6] != "bf16" else TILES_16
        for rnd in range(2):
            for tile in tiles:
                for ahead in (False, True):
                    setattr(da, flag, ahead)
                    r = ap.time_at_tile(shape, tile, "f32_pdl", l2, copy)
                    r.update(round=rnd, ahead=int(ahead))
                    rows.append(r)
                    print(",".join(str(r[k]) for k in ("shape", "tile", "ahead", "round", "us",
                                                       "frac_copy", "max_abs_err")), flush=True)
                    write_rows(out / "kernels.csv", rows)
    print(f"copy {copy / 1e9:.1f} GB/s; {torch.cuda.get_device_name()}", flush=True)


def cmd_step(out: Path, flag: str = "KV_AHEAD", both=("bf16", "int8", "fp8_e4m3"),
             rounds: int = 2) -> None:
    """The kv group's decode step, ``flag`` off and on for the caches in ``both`` (off only for
    the others), ``rounds`` rounds; ``step.csv`` in ``out``."""
    from sweep.measure.benchmark import zoo_case

    copy = _copy()
    rows = []
    for rnd in range(rounds):
        for kvd in ("bf16", "int8", "fp8_e4m3"):
            for ahead in (False, True) if kvd in both else (False,):
                setattr(da, flag, ahead)
                t0 = time.time()
                r = zoo_case("llama3_2_1b", 64, 8192, 32, "cudagraph", "triton", kvd, copy, 1, 2)
                row = dict(kv=kvd, ahead=int(ahead), round=rnd, wall_s=round(time.time() - t0, 1),
                           **{k: r[k] for k in ("decode_tok_s", "tpot_ms", "tpot_ms_min",
                                                "tpot_ms_p90", "mbu_vs_measured")})
                rows.append(row)
                print(row, flush=True)
                write_rows(out / "step.csv", rows)
    print(f"copy {copy / 1e9:.1f} GB/s; {torch.cuda.get_device_name()}", flush=True)


if __name__ == "__main__":
    dest = Path(sys.argv[2])
    dest.mkdir(parents=True, exist_ok=True)
    {"kernels": cmd_kernels, "step": cmd_step}[sys.argv[1]](dest)
