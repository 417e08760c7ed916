"""Which designs end an fp8-KV decode in non-finite logits (held-out pair ``mis_fp8_8k``: Mistral-7B
shape, batch 4, prompt 8192), on 2-layer cuts of the shapes so each case takes seconds.

For each case: prefill, then 16 decode steps (mode cudagraph), the first step whose logits are
not finite, and the cache's tensors (every layer's) checked for non-finite values after them.

    python3 bench/reference/fp8_probe.py        (prints a table; $OUT/fp8_probe.json)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels import switches  # noqa: E402
from zoo import Generator, ModelConfig, Transformer  # noqa: E402

CASES = [  # name, preset, overrides, batch, prompt, switch changes
    ("mistral_fp8_b4_8k", "mistral_7b_v0_3", {}, 4, 8192, {}),
    ("mistral_fp8_b4_8k_nofold", "mistral_7b_v0_3", {}, 4, 8192, {"rope_in_attention": False}),
    ("mistral_fp8_b4_2k", "mistral_7b_v0_3", {}, 4, 2048, {}),
    ("mistral_fp8_b1_8k", "mistral_7b_v0_3", {}, 1, 8192, {}),
    ("mistral_int8_b4_8k", "mistral_7b_v0_3", {"kv_dtype": "int8"}, 4, 8192, {}),
    ("l8b_fp8_b4_8k", "llama3_1_8b", {}, 4, 8192, {}),
    ("l1b_hd128_fp8_b4_8k", "llama3_2_1b", {"head_dim": 128, "n_heads": 16, "n_kv_heads": 4}, 4,
     8192, {}),
    ("l1b_fp8_b4_8k", "llama3_2_1b", {}, 4, 8192, {}),
]


def run(name, preset, over, B, T, sw):
    over = dict({"kv_dtype": "fp8_e4m3", "n_layers": 2}, **over)
    cfg = ModelConfig.from_name(preset, **over).resolved("cuda")
    with switches.use(**sw):
        model = Transformer.build(cfg, "cuda", seed=0)
        gen = Generator(model, B, T + 17, "cudagraph")
        g = torch.Generator(device="cuda").manual_seed(1)
        prompt = torch.randint(0, cfg.vocab_size, (B, T), device="cuda", generator=g)
        logits = gen.prefill(prompt)
        out = {"name": name, "prefill_finite": bool(torch.isfinite(logits).all())}
        tok = logits.argmax(-1, keepdim=True)
        first_bad = None
        for i in range(16):
            logits = gen.decode(tok)
            if first_bad is None and not torch.isfinite(logits).all():
                first_bad = i
            tok = logits.argmax(-1, keepdim=True)
        out["first_nonfinite_step"] = first_bad
        cache = model.layers[0].attention.cache
        out["cache"] = {}
        if cache is not None:
            tensors = dict(cache.named_buffers())
            tensors.update({k: v for k, v in vars(cache).items() if torch.is_tensor(v)})
            for k, v in tensors.items():
                if torch.is_tensor(v) and v.is_floating_point():
                    f = v.float()
                    out["cache"][k] = {"nonfinite": int((~torch.isfinite(f)).sum()),
                                       "absmax": float(f[torch.isfinite(f)].abs().max())
                                       if torch.isfinite(f).any() else None,
                                       "zeros": int((f == 0).sum()), "shape": list(v.shape)}
    del model, gen
    torch.cuda.empty_cache()
    return out


res = []
for case in CASES:
    try:
        r = run(*case)
    except Exception as e:  # noqa: BLE001
        r = {"name": case[0], "error": f"{type(e).__name__}: {e}"[:400]}
    res.append(r)
    print(json.dumps(r), flush=True)
out = Path(os.environ.get("OUT", "out"))
out.mkdir(parents=True, exist_ok=True)
(out / "fp8_probe.json").write_text(json.dumps(res, indent=1))
