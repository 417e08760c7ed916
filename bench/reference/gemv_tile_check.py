"""Every dot-path tile of the decode GEMV (``kernels.gemv._DOT``, split-K included) against the
reference at a batch of 2-16 rows, the first call and after 20 calls on the same workspace, per
prologue: which tiles give wrong outputs on this GPU (the H200's NaN logits under autotuning).

    python3 bench/reference/gemv_tile_check.py OUT.json
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels import gemv  # noqa: E402
from sweep.common.env import detect_device, environment  # noqa: E402


def main() -> int:
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for M, N, K in ((12, 1536, 4096), (8, 2048, 2048), (4, 1024, 4096)):
        for pro in ("norm", "none", "swiglu"):
            Kin = 2 * K if pro == "swiglu" else K
            x = torch.randn(M, Kin, device="cuda", dtype=torch.bfloat16, generator=g)
            w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K**0.5)
            kw = {}
            if pro == "norm":
                kw = dict(norm_weight=torch.rand(K, device="cuda", dtype=torch.bfloat16,
                                                 generator=g) + 0.5,
                          residual=torch.randn(M, K, device="cuda", dtype=torch.bfloat16,
                                               generator=g))
            want = gemv.reference(x, w, None, pro, eps=1e-5, **kw)
            want = (want[0] if isinstance(want, tuple) else want).float()
            scale = want.abs().max().item()
            for c in dict.fromkeys(gemv._DOT):
                bn, bk, sk, nw_, st = c
                cfg = {"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sk, "PREFETCH_X": 0, "W_AHEAD": 0,
                       "num_warps": nw_, "num_stages": st}
                errs = []
                for i in range(20):
                    got = gemv.gemv(x, w, None, pro, eps=1e-5, config=cfg, **kw)
                    got = (got[0] if isinstance(got, tuple) else got).float()
                    if i in (0, 19):
                        errs.append((got - want).abs().max().item() / scale)
                torch.cuda.synchronize()
                rows.append({"M": M, "N": N, "K": K, "prologue": pro, "tile": c,
                             "rel_err_first": errs[0], "rel_err_20th": errs[1]})
    bad = [r for r in rows if not (r["rel_err_first"] < 0.05 and r["rel_err_20th"] < 0.05)]
    Path(sys.argv[1]).write_text(json.dumps({"env": environment(detect_device("cuda")),
                                             "bad": bad, "rows": rows}, indent=1))
    for r in bad:
        print(r)
    print(f"{len(bad)} of {len(rows)} wrong")
    return 0


if __name__ == "__main__":
    sys.exit(main())
