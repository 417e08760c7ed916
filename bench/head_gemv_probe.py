"""Latent attention's absorbed products on the GPU: ``kernels.head_gemv`` against the cuBLAS
batched GEMM it replaced (``torch.bmm`` over the heads), per shape (heads, batch, ``W_UK`` or
``W_UV``), microseconds per call inside a CUDA graph (Triton's ``do_bench_cudagraph``, median),
and the bytes' share of the copy bandwidth given on the command line.

    python -m bench.head_gemv_probe OUT_DIR [--copy-tbps 2.9]   # OUT_DIR/head_gemv.csv
"""

from __future__ import annotations

import argparse
import csv
import functools
import pathlib

import torch
import triton

from kernels.head_gemv import head_gemv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--copy-tbps", type=float, default=float("nan"),
                    help="the copy bandwidth measured on this card (TB/s), for the ratio")
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
                             "head_gemv_of_copy": round(nbytes / (t_ours * 1e-6) / 1e12
                                                        / a.copy_tbps, 3),
                             "max_abs_diff": err})
                print(rows[-1], flush=True)
    with open(a.out / "head_gemv.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
