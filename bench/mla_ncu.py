"""MLA's absorbed decode kernel on a GPU (issue 39, item 2): its time against the latent bytes'
roofline, and Nsight Compute's DRAM bytes against the analytic latent + rotated-key bytes.

    python -m bench.mla_ncu OUT_DIR      # OUT_DIR/mla_ncu.json and mla_ncu.md

Shapes: DeepSeek-V2-Lite's heads (16, ``kv_lora_rank`` 512, ``qk_rope_head_dim`` 64) and
DeepSeek-V3's 128, batch 1 and 8, a cache of 4096 and 32768 positions, bf16, the last position
attended. Timing: the calibration's timer (``sweep.measure.microbench.timer``: a CUDA graph of
back-to-back calls, each on another copy of the cache, ``cold_copies``); roofline: the analytic bytes
``B S (r + R) 2 + B H (r + R) 2`` over the copy bandwidth measured in the same run. ncu: one call
in a child between ``cudaProfilerStart/Stop`` (``sweep.measure.ncu.command``, the ``memory``
set, caches flushed before each kernel, clocks as they are).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SHAPES = [(16, 1, 4096), (16, 8, 4096), (16, 1, 32768), (16, 8, 32768), (128, 1, 32768)]
R_LAT, R_PE = 512, 64


def _inputs(H, B, S, copies=1):
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16
    q = torch.randn(B, H, R_LAT, device="cuda", dtype=bf, generator=g)
    qp = torch.randn(B, H, R_PE, device="cuda", dtype=bf, generator=g)
    caches = [(torch.randn(B, S, R_LAT, device="cuda", dtype=bf, generator=g),
               torch.randn(B, S, R_PE, device="cuda", dtype=bf, generator=g))
              for _ in range(copies)]
    return q, qp, caches, torch.tensor([S - 1], device="cuda")


def child(H: int, B: int, S: int) -> None:
    import torch

    from kernels.mla_decode import mla_decode

    q, qp, [(lat, kpe)], pos = _inputs(H, B, S)
    for _ in range(2):
        mla_decode(q, qp, lat, kpe, pos, 0.07)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    mla_decode(q, qp, lat, kpe, pos, 0.07)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def timed(H: int, B: int, S: int, copy_bw: float) -> dict:
    from kernels.mla_decode import mla_decode
    from sweep.measure import microbench as mb

    nbytes = 2.0 * B * S * (R_LAT + R_PE) + 2.0 * B * H * (R_LAT + R_PE)
    q, qp, caches, pos = _inputs(H, B, S, mb.cold_copies(nbytes, True, cap=16))
    sp = mb.timer(True, 7)([lambda c=c: mla_decode(q, qp, *c, pos, 0.07) for c in caches])
    us = sp["median"] * 1e6
    return {"H": H, "B": B, "S": S, "us": us, "bytes": nbytes,
            "of_roofline": nbytes / copy_bw / (us / 1e6)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(*map(int, argv[1:4]))
        return 0
    from sweep.caches.ceiling_cache import measure_ceilings
    from sweep.common.env import detect_device
    from sweep.measure import ncu

    out = Path(argv[0] if argv else "out")
    out.mkdir(parents=True, exist_ok=True)
    bw = measure_ceilings(detect_device("cuda"), cache_dir=out / "ceilings")["copy_bytes_s"]
    rows = []
    for H, B, S in SHAPES:
        r = timed(H, B, S, bw)
        log = out / f"mla_H{H}_B{B}_S{S}.ncu.csv"
        cmd = ncu.command(log, "memory") + [sys.executable, "-m", "bench.mla_ncu", "--child",
                                            str(H), str(B), str(S)]
        rc = subprocess.run(cmd, env=os.environ.copy(), timeout=300).returncode
        ks = ncu.parse_csv(log.read_text()) if not rc and log.exists() else []
        split = [k for k in ks if "_mla_split" in k["kernel"]]
        if split:
            r["ncu_dram_read"] = split[0]["dram_read"]
            r["ncu_ratio"] = split[0]["dram_read"] / r["bytes"]
            r["ncu_us"] = sum(k["time_ns"] for k in ks) / 1e3
        else:
            r["ncu_error"] = f"rc={rc}"
        print(json.dumps(r), flush=True)
        rows.append(r)
    (out / "mla_ncu.json").write_text(json.dumps({"copy_bytes_s": bw, "rows": rows}, indent=1))
    md = ["| heads | batch | positions | us | analytic MB | of roofline | ncu DRAM read MB | ratio |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    md += [f"| {r['H']} | {r['B']} | {r['S']} | {r['us']:.1f} | {r['bytes'] / 1e6:.2f} | "
           f"{r['of_roofline']:.2f} | {r.get('ncu_dram_read', float('nan')) / 1e6:.2f} | "
           f"{r.get('ncu_ratio', float('nan')):.3f} |" for r in rows]
    (out / "mla_ncu.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
