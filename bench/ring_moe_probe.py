"""Two questions for the GPU, one call (2026-11-27): (1) does a decode-attention calibration
entry of a ring shape (``sweep.measure.microbench.decode_attention``) time what the model's
ring layer runs — the same kernel at the cache capacity the model allocates (the window) and a
position past it — or something else (the cache's capacity, the position)? (2) the MoE grouped
GEMMs (``sweep.measure.microbench_moe``) at OLMoE-1B-7B's and Qwen3-30B-A3B's decode and prefill
shapes, with a few tile choices for the prefill's.

    python -m bench.ring_moe_probe OUT      # OUT/ring_moe_probe.json and a console table
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    import torch

    from bench.gpu import setup
    from kernels import moe_gemm as K_
    from kernels.decode_attention import decode_attention
    from sweep.measure import microbench as mb
    from sweep.measure.microbench_moe import moe_gemms

    out, tm, rnd = setup(7)

    rows = []
    B, Hkv, G, D = 8, 8, 4, 64
    for S in (512, 1024, 4096):
        for cap in (S, S + 64, 32832):  # the microbench's own calls: kv_len = S
            r = mb.decode_attention("cuda", tm, rnd, [dict(impl="triton", kv_dtype="bf16", B=B,
                                                           Hkv=Hkv, G=G, S=S, D=D, cap=cap)])[0]
            rows.append(dict(what="microbench", S=S, cap=cap, kv_len=S, us=r["time_s"] * 1e6))
        for kv_len in (S, 4 * S):  # a ring of S slots, as the model calls it (new_kv folded)
            q = rnd(B, Hkv * G, 1, D)
            tab = 4 * S + 64
            new_kv = (rnd(B, Hkv, D), rnd(B, Hkv, D), torch.rand(tab, D, device="cuda"),
                      torch.rand(tab, D, device="cuda"))
            pos = torch.tensor([kv_len - 1], device="cuda")
            fns = []
            for _ in range(mb.cold_copies(2.0 * B * Hkv * S * D * 2, True, cap=32)):
                k, v = rnd(B, Hkv, S, D), rnd(B, Hkv, S, D)
                fns.append(lambda q=q, k=k, v=v, p=pos, n=new_kv: decode_attention(
                    q, k, v, p, None, None, pdl=True, new_kv=n))
            sp = tm(fns)
            rows.append(dict(what="ring", S=S, cap=S, kv_len=kv_len, us=sp["median"] * 1e6))
    for name, E, k, d, Fe in (("olmoe", 64, 8, 2048, 1024), ("qwen3_30b_a3b", 128, 8, 2048, 768)):
        for M in (1, 8, 64, 4096, 8192):
            for op, N, K in (("moe_up", 2 * Fe, d), ("moe_down", d, Fe)):
                r = moe_gemms("cuda", tm, rnd, [dict(op=op, M=M, E=E, k=k, N=N, K=K,
                                                     dtype="bf16")])[0]
                rows.append(dict(what="moe_gemm", model=name, op=op, M=M, us=r["time_s"] * 1e6,
                                 tflops=r["flops"] / r["time_s"] / 1e12,
                                 tb_s=r["bytes"] / r["time_s"] / 1e12, touched=r["touched"],
                                 tile=list(K_.tiles(M * k, E))))
        for M in (4096,):  # the prefill's up GEMM under other tiles
            S_ = M * k
            x = rnd(M, d)
            w13 = rnd(E, 2 * Fe, d)
            idx = rnd(M, E, dt=torch.float32).topk(k, dim=-1).indices
            for tile in ((64, 64, 64, 4, 3), (64, 128, 64, 4, 3), (128, 64, 64, 4, 3),
                         (128, 128, 64, 8, 3), (64, 64, 128, 4, 4), (128, 64, 64, 8, 4)):
                try:
                    al = K_.align(idx, E, tile[0])
                    sp = tm(lambda al=al, tile=tile, x=x, w=w13, k=k: K_.moe_up(x, w, k, al, tile),
                            duty=True)
                    rows.append(dict(what="moe_up_tile", model=name, M=M, tile=list(tile),
                                     us=sp["median"] * 1e6,
                                     tflops=2.0 * S_ * 2 * Fe * d / sp["median"] / 1e12))
                except Exception as e:  # a tile that does not fit shared memory
                    rows.append(dict(what="moe_up_tile", model=name, M=M, tile=list(tile),
                                     error=str(e)[:200]))
    for r in rows:
        print(json.dumps(r))
    (out / "ring_moe_probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
