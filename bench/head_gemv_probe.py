"""Latent attention's absorbed products on the GPU: ``kernels.head_gemv`` against the cuBLAS
batched GEMM it replaced (``torch.bmm`` over the heads), per shape (heads, batch, ``W_UK`` or
``W_UV``), microseconds per call inside a CUDA graph (Triton's ``do_bench_cudagraph``, median),
then the per-head GEMV's one-row tiles against cuBLAS at 16 heads.

    python -m bench.head_gemv_probe OUT_DIR   # OUT_DIR/head_gemv.csv, head_gemv_tiles.csv
"""

from __future__ import annotations

import argparse
import functools
import pathlib

import torch
import triton

from bench.gpu import write_rows
from kernels.head_gemv import head_gemv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    dev, dt = "cuda", torch.bfloat16
    for H in (16, 128):
        wkv_b = torch.randn(H, 128 + 128, 512, device=dev, dtype=dt) / 16
        w_uk, w_uv = wkv_b[:, :128], wkv_b[:, 128:]
        for B in (1, 8, 64):
            q = torch.randn(B, H, 128, device=dev, dtype=dt)
            o = torch.randn(B, H, 512, device=dev, dtype=dt)
            cases = {  # (ours, cuBLAS's), each bound to this shape's tensors
                "w_uk": (functools.partial(head_gemv, q, w_uk),
                         functools.partial(torch.bmm, q.transpose(0, 1), w_uk)),
                "w_uv": (functools.partial(head_gemv, o, w_uv, transposed=True),
                         functools.partial(torch.bmm, o.transpose(0, 1), w_uv.transpose(1, 2))),
            }
            for op, (ours, cublas) in cases.items():
                want = cublas().transpose(0, 1).float()
                err = (ours().float() - want).abs().max().item()
                nbytes = H * 128 * 512 * 2 + B * H * (128 + 512) * 2
                t_ours = triton.testing.do_bench_cudagraph(ours, rep=50) * 1e3
                t_cub = triton.testing.do_bench_cudagraph(cublas, rep=50) * 1e3
                rows.append({"op": op, "heads": H, "batch": B, "bytes": nbytes,
                             "head_gemv_us": round(t_ours, 2), "cublas_bmm_us": round(t_cub, 2),
                             "max_abs_diff": err})
                print(rows[-1], flush=True)
    # one row: the tiles (BLOCK_N, BLOCK_K, warps, stages) against cuBLAS
    H, B = 16, 1
    wkv_b = torch.randn(H, 256, 512, device=dev, dtype=dt) / 16
    w_uk, w_uv = wkv_b[:, :128], wkv_b[:, 128:]
    q = torch.randn(B, H, 128, device=dev, dtype=dt)
    o = torch.randn(B, H, 512, device=dev, dtype=dt)
    tiles = []
    for op, x, w, tr in (("w_uk", q, w_uk, False), ("w_uv", o, w_uv, True)):
        for t in ((16, 128, 4, 3), (32, 128, 4, 3), (64, 128, 4, 3), (128, 128, 4, 3),
                  (32, 128, 2, 1), (64, 128, 8, 2), (16, 512, 4, 1), (8, 512, 4, 1),
                  (32, 256, 4, 2), (16, 256, 4, 2), (128, 64, 4, 3), (64, 64, 4, 3),
                  (512, 16, 4, 3), (256, 32, 8, 3)):
            try:
                us = triton.testing.do_bench_cudagraph(
                    functools.partial(head_gemv, x, w, transposed=tr, tile=t), rep=50) * 1e3
            except Exception as e:  # a tile that does not compile here: say so, go on
                us = float("nan")
                print(op, t, type(e).__name__, str(e)[:200], flush=True)
            tiles.append({"op": op, "tile": "x".join(map(str, t)), "us": round(us, 2)})
            print(tiles[-1], flush=True)
    write_rows(a.out / "head_gemv_tiles.csv", tiles)
    write_rows(a.out / "head_gemv.csv", rows)


if __name__ == "__main__":
    main()
