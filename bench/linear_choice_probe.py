"""Which decode linear path the main job's layers should run (issue 34): for each linear layer a
decode step of the ``gqa_vs_mha`` designs launches (Llama-3.2-1B's body, n_kv_heads 1 .. 32; one
and eight rows), the Triton GEMV with its prologue (``kernels.gemv``) and the cuBLAS path (the
prologue as its own kernel, then ``F.linear``: ``kernels.decode_linear.cublas_linear``), each
timed warm (as ``kernels.decode_linear.choose`` timed them before 2026-11-28) and cold (after a
read of 2.5x the L2, as the decode step meets a layer's weights; as ``choose`` times them now),
in a CUDA graph (``kernels.graph_timing.time_ms``), beside the choice shipped for this device.

    python -m bench.linear_choice_probe OUT.csv [--cold-tune]

``--cold-tune``: the GEMV's tiles tuned cold too (``switches.cold_tune``; choices of that key are
not shipped, so they are tuned here), to see whether the tile choice or the path choice moves.
"""

from __future__ import annotations

import functools
import sys

import torch

from bench.gpu import write_rows
from kernels import decode_linear as DL
from kernels import switches, tuning
from kernels.gemv import gemv
from kernels.graph_timing import time_ms
from zoo import ModelConfig


def shapes() -> list[tuple]:
    """``(M, N, K, prologue)`` of every decode GEMV the main job's designs launch at 1 and 8
    rows (the kernel list the performance model prices, ``sweep.analysis.predict``)."""
    from sweep.analysis.predict import kernel_list

    out = set()
    for kv in (1, 2, 4, 8, 16, 32):
        cfg = ModelConfig.from_name("llama3_2_1b", n_kv_heads=kv, kernels="triton")
        for M in (1, 8):
            for k in kernel_list(cfg, M, 1, 4096, "triton"):
                if k.kind == "gemv":
                    out.add((M, k.shape["N"], k.shape["K"], k.shape["prologue"]))
    return sorted(out)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = args[0] if args else "linear_choice.csv"
    cold_tune = "--cold-tune" in sys.argv
    switches.set_current(switches.Switches(cold_tune=cold_tune))
    dev, dt = torch.device("cuda"), torch.bfloat16
    name = tuning.device_name(dev)
    rows = []
    for M, N, K, pro in shapes():
        base = pro.split("+")[0]
        x = torch.randn(M, 2 * K if base == "swiglu" else K, device=dev, dtype=dt)
        w = torch.randn(N, K, device=dev, dtype=dt) / K**0.5
        nw = torch.ones(K, device=dev, dtype=dt) if base == "norm" else None
        res = torch.randn(M, K, device=dev, dtype=dt) if pro.endswith("+res") else None
        fused = functools.partial(gemv, x, w, None, base, nw, 1e-5, res)
        cublas = functools.partial(DL.cublas_linear, x, w, None, base, nw, 1e-5, res)
        t = {f"{name}_{how}_us": round(time_ms(fn, cold=cold) * 1e3, 2)
             for name, fn in (("triton", fused), ("cublas", cublas))
             for how, cold in (("warm", False), ("cold", True))}
        shipped = tuning.lookup("decode_linear", (M, N, K, pro, "bfloat16", "cuda:0", "cold"), name)
        row = {"M": M, "N": N, "K": K, "prologue": pro, "cold_tune": int(cold_tune),
               "weight_MB": round(N * K * 2 / 1e6, 1),
               **t, "warm_pick": "triton" if t["triton_warm_us"] <= t["cublas_warm_us"]
               else "cublas",
               "cold_pick": "triton" if t["triton_cold_us"] <= t["cublas_cold_us"] else "cublas",
               "shipped": shipped or ""}
        rows.append(row)
        print(row, flush=True)
    write_rows(out, rows)


if __name__ == "__main__":
    main()
