"""Whether a decode step's GEMVs run faster in sequence than the calibration prices each alone.

The graphed Triton decode steps of the development set measured 3.1-4.4% below their calibrated
predictions (H100, thirty-fifth session, ``results/reference/heldout_h100.md``), and the replay's
kernel durations summed 3-8% above the step: the kernels overlap under programmatic dependent
launch (PDL). Each calibration entry is a kernel timed back to back with copies of itself
(``sweep.measure.microbench.timer``: a graph of 8 calls). This probe times, for a real model's
per-layer GEMVs (qkv, out_proj, w13, w2 with their prologues, as ``kernels.decode_linear``
launches them):

- ``alone``: each as the calibration times it (``microbench.gemvs``, the same timer), summed over
  the layers;
- ``chain``: every layer's four in the model's order, each layer its own weights, one graph
  (the step without its attention and small kernels);
- both again with PDL off (``switches.pdl=False``).

``chain / alone`` below 1 says the sequence runs faster than the sum of its calibrated prices;
if it does with PDL on and not off, the overlap of unlike kernels under PDL is the cause.

    python3 bench/chain_probe.py OUT.json [llama3_2_1b:1,llama3_1_8b:8,...]
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = "llama3_2_1b:1,llama3_2_1b:8,llama3_1_8b:1,llama3_1_8b:8"


def gemv_layer(cfg, B: int) -> list[tuple]:
    """``(M, N, K, prologue)`` of one layer's GEMVs, in launch order (the predictor's list)."""
    from sweep.analysis.predict import kernel_list

    return [(k.shape["M"], k.shape["N"], k.shape["K"], k.shape["prologue"])
            for k in kernel_list(cfg, B, 1, 512, "triton")
            if k.kind == "gemv" and k.repeat == cfg.n_layers]


def chain_fn(shapes, layers: int, rnd):
    """One call running ``layers`` layers of ``shapes`` in order, each layer its own weights."""
    import types

    from kernels import decode_linear

    calls = []
    for _ in range(layers):
        for M, N, K, pro in shapes:
            base, res = pro.split("+")[0], "+res" in pro
            x = rnd(M, 2 * K if base == "swiglu" else K)
            r = rnd(M, K) if res else None
            norm = types.SimpleNamespace(weight=rnd(K), eps=1e-5) if base == "norm" else None
            lay = types.SimpleNamespace(weight=rnd(N, K), bias=None)
            calls.append(lambda x=x, lay=lay, b=base, n=norm, r=r:
                         decode_linear.linear(x, lay, b, n, r))

    def run():
        for c in calls:
            c()
    return run


def main() -> int:
    import torch

    from kernels import switches
    from sweep.common.env import detect_device, environment
    from sweep.measure import microbench as mb
    from zoo import ModelConfig

    out = Path(sys.argv[1])
    cases = [(c.split(":")[0], int(c.split(":")[1]))
             for c in (sys.argv[2] if len(sys.argv) > 2 else CASES).split(",")]
    cuda = torch.cuda.is_available()  # (the CPU: a smoke run in the interpreter, times meaningless)
    dev, dt = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, device=dev, dtype=dt, generator=g) * 0.02

    tm = mb.timer(cuda, 7 if cuda else 1)
    res = {"env": environment(detect_device("auto")), "cases": []}
    for name, B in cases:
        cfg = ModelConfig.from_name(name)
        shapes = gemv_layer(cfg, B)
        row = {"model": name, "batch": B, "layers": cfg.n_layers, "shapes": shapes}
        for pdl in (True, False):
            with switches.use(pdl=pdl), torch.no_grad():
                alone = mb.gemvs(shapes, cuda, tm, rnd, "bf16" if cuda else "fp32")
                fn = chain_fn(shapes, cfg.n_layers, rnd)
                fn()  # choices made outside any capture
                chain = tm(fn, n=2)
            tag = "pdl" if pdl else "nopdl"
            row[f"alone_us_{tag}"] = {f"{p}:{N}x{K}": 1e6 * e["time_s"]
                                      for (_, N, K, p), e in zip(shapes, alone)}
            row[f"alone_sum_us_{tag}"] = cfg.n_layers * 1e6 * sum(e["time_s"] for e in alone)
            row[f"chain_us_{tag}"] = 1e6 * chain["median"]
            row[f"chain_over_alone_{tag}"] = row[f"chain_us_{tag}"] / row[f"alone_sum_us_{tag}"]
            torch.cuda.empty_cache()
        print(json.dumps({k: v for k, v in row.items() if k != "shapes"}), flush=True)
        res["cases"].append(row)
        out.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
