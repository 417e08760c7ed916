"""The band prefill kernel on a GPU (issue 39): ``kernels.prefill_attention`` against the paths
it replaces (``zoo.gqa.blocked``: SDPA per block of rows with a band mask, float32 plain ops with
sinks) and causal SDPA, Llama-3.2-1B's heads (32 query / 8 KV of 64) and Mistral-7B's (32 / 8 of
128), batch 1, one layer, bf16; each call timed with CUDA events (median of 5 after 2 warm-up).

    python -m bench.prefill_band_probe OUT      # OUT/prefill_band_probe.json and a table
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    import torch
    import torch.nn.functional as F

    from kernels.prefill_attention import prefill_attention
    from zoo.gqa import blocked

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
    out.mkdir(parents=True, exist_ok=True)

    def timed(fn, reps=5):
        for _ in range(2):
            fn()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return sorted(ts)[len(ts) // 2]

    rows = []
    for D, T in ((64, 8192), (64, 32768), (128, 8192)):
        H, Hkv = 32, 8
        qkv = torch.randn(1, T, (H + 2 * Hkv) * D, device="cuda", dtype=torch.bfloat16)
        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        q = q.view(1, T, H, D).transpose(1, 2)
        k = k.view(1, T, Hkv, D).transpose(1, 2)
        v = v.view(1, T, Hkv, D).transpose(1, 2)
        sinks = torch.randn(H, device="cuda")
        for W in (None, 1024, 4096):
            for sk in (None, sinks):
                band_flops = 2.0 * H * D * T * min(T, W or T)  # the calibration's count
                r = dict(D=D, T=T, W=W or 0, sinks=sk is not None)
                a = (q, k, v, W, sk)
                r["ours_ms"] = timed(lambda a=a: prefill_attention(*a))
                if W is None and sk is None:
                    r["sdpa_ms"] = timed(lambda a=a: F.scaled_dot_product_attention(
                        *a[:3], is_causal=True, enable_gqa=True))
                elif T <= 8192 or sk is None:  # the float32 path of sinks at 32k: minutes
                    r["blocked_ms"] = timed(lambda a=a: blocked(*a), reps=3)
                r["ours_tflops"] = band_flops / 2 / (r["ours_ms"] / 1e3) / 1e12  # causal: half
                ref = blocked(q[:, :, :2048].float(), k[:, :, :2048].float(),
                              v[:, :, :2048].float(), W, sk)
                got = prefill_attention(q[:, :, :2048], k[:, :, :2048], v[:, :, :2048], W, sk)
                r["max_abs_err_2048"] = (got.float() - ref).abs().max().item()
                print(json.dumps(r), flush=True)
                rows.append(r)
    (out / "prefill_band_probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
