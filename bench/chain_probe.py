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
- ``attn``: the same chain with the layer's decode attention after its qkv GEMV (each layer its
  own bf16 KV cache of ``S`` positions, the kernel as ``microbench.decode_attention`` launches
  it), against the sum with the attention's own calibrated time (``alone_attn``);
- all of it again with PDL off (``switches.pdl=False``).

``chain / alone`` below 1 says the sequence runs faster than the sum of its calibrated prices;
if it does with PDL on and not off, the overlap of unlike kernels under PDL is the cause; the
``attn`` chain's ratio against the GEMV chain's says what the attention -> GEMV boundary adds.

    python3 bench/chain_probe.py OUT.json [llama3_2_1b:1:576,llama3_1_8b:8:4128,...]   (model:batch:S)
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the development set's pairs: batch and the mean decode context (prompt + half the new tokens)
CASES = "llama3_2_1b:1:576,llama3_2_1b:8:4128,llama3_1_8b:1:576,llama3_1_8b:8:4128"


def layer_kernels(cfg, B: int, S: int) -> tuple[list[tuple], dict]:
    """``(M, N, K, prologue)`` of one layer's GEMVs in launch order, and its decode attention's
    shape (the predictor's list, a bf16 cache, context ``S``)."""
    from sweep.analysis.predict import kernel_list

    ks = kernel_list(cfg.replace(kv_dtype="bf16"), B, 1, S, "triton")
    gemvs = [(k.shape["M"], k.shape["N"], k.shape["K"], k.shape["prologue"])
             for k in ks if k.kind == "gemv" and k.repeat == cfg.n_layers]
    attn = next(dict(k.shape, cap=S + 64) for k in ks if k.kind == "decode_attn")
    return gemvs, attn


def attention_call(a: dict, rnd, dev: str):
    """One decode attention of shape ``a`` on its own bf16 cache, launched as
    ``sweep.measure.microbench.decode_attention`` launches it (RoPE and the cache write folded
    in under ``switches.rope_in_attention``; PDL where supported)."""
    import torch

    from kernels import switches
    from kernels.decode_attention import decode_attention
    from kernels.gemv import pdl_supported

    B, Hkv, G, S, D, cap = (int(a[k]) for k in ("B", "Hkv", "G", "S", "D", "cap"))
    q, pos = rnd(B, Hkv * G, 1, D), torch.tensor([S - 1], device=dev)
    k, v = rnd(B, Hkv, cap, D), rnd(B, Hkv, cap, D)
    new_kv = None
    if switches.current().rope_in_attention:
        new_kv = (rnd(B, Hkv, D), rnd(B, Hkv, D), torch.rand(cap, D, device=dev),
                  torch.rand(cap, D, device=dev))
    pdl = pdl_supported(torch.device(dev))
    return lambda: decode_attention(q, k, v, pos, None, None, pdl=pdl, new_kv=new_kv)


def chain_fn(shapes, layers: int, rnd, attn: dict | None = None, dev: str = "cuda"):
    """One call running ``layers`` layers of ``shapes`` in order, each layer its own weights (and,
    with ``attn``, its decode attention after the first GEMV, on its own cache)."""
    import types

    from kernels import decode_linear

    calls = []
    for _ in range(layers):
        for i, (M, N, K, pro) in enumerate(shapes):
            base, res = pro.split("+")[0], "+res" in pro
            x = rnd(M, 2 * K if base == "swiglu" else K)
            r = rnd(M, K) if res else None
            norm = types.SimpleNamespace(weight=rnd(K), eps=1e-5) if base == "norm" else None
            lay = types.SimpleNamespace(weight=rnd(N, K), bias=None)
            calls.append(lambda x=x, lay=lay, b=base, n=norm, r=r:
                         decode_linear.linear(x, lay, b, n, r))
            if attn is not None and i == 0:
                calls.append(attention_call(attn, rnd, dev))

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
    cases = [(c.split(":")[0], int(c.split(":")[1]), int(c.split(":")[2]))
             for c in (sys.argv[2] if len(sys.argv) > 2 else CASES).split(",")]
    cuda = torch.cuda.is_available()  # (the CPU: a smoke run in the interpreter, times meaningless)
    dev, dt = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, device=dev, dtype=dt, generator=g) * 0.02

    tm = mb.timer(cuda, 7 if cuda else 1)
    res = {"env": environment(detect_device("auto")), "cases": []}
    for name, B, S in cases:
        cfg = ModelConfig.from_name(name)
        shapes, attn = layer_kernels(cfg, B, S)
        row = {"model": name, "batch": B, "S": S, "layers": cfg.n_layers, "shapes": shapes,
               "attention": attn}
        for pdl in (True, False):
            tag, L = "pdl" if pdl else "nopdl", cfg.n_layers
            with switches.use(pdl=pdl), torch.no_grad():
                alone = mb.gemvs(shapes, cuda, tm, rnd, "bf16" if cuda else "fp32")
                a_alone = mb.decode_attention(dev, tm, rnd, [dict(attn, impl="triton",
                                                                  kv_dtype="bf16")])[0]
                row[f"alone_us_{tag}"] = {f"{p}:{N}x{K}": 1e6 * e["time_s"]
                                          for (_, N, K, p), e in zip(shapes, alone)}
                row[f"alone_attn_us_{tag}"] = 1e6 * a_alone["time_s"]
                row[f"alone_sum_us_{tag}"] = L * 1e6 * sum(e["time_s"] for e in alone)
                for what, a in (("chain", None), ("attn", attn)):
                    fn = chain_fn(shapes, L, rnd, a, dev)
                    fn()  # choices made outside any capture
                    row[f"{what}_us_{tag}"] = 1e6 * tm(fn, n=2)["median"]
                    del fn
                    torch.cuda.empty_cache()
            total = row[f"alone_sum_us_{tag}"] + L * row[f"alone_attn_us_{tag}"]
            row[f"chain_over_alone_{tag}"] = row[f"chain_us_{tag}"] / row[f"alone_sum_us_{tag}"]
            row[f"attn_over_alone_{tag}"] = row[f"attn_us_{tag}"] / total
        print(json.dumps({k: v for k, v in row.items() if k != "shapes"}), flush=True)
        res["cases"].append(row)
        out.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
