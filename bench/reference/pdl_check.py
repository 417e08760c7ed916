"""Do the shipped shapes' decode logits depend on programmatic dependent launch (``pdl``)? On the
H200 the held-out design d64_w768 ends every decode loop in NaN with ``pdl`` on and runs with it
off (``nan_probe.py``). For each shape: prefill, 8 graphed decode steps with ``pdl`` on and off
from the same weights and prompt; the largest logits difference and whether any is non-finite.

    python3 bench/reference/pdl_check.py      ($OUT/pdl_check.json)
    AUTOTUNE=0 python3 bench/reference/pdl_check.py   (fixed tiles: pdl alone differs)
"""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels import switches  # noqa: E402
from zoo import Generator, ModelConfig, Transformer  # noqa: E402

CASES = [("l1b_b1", "llama3_2_1b", {}, 1), ("l1b_b8", "llama3_2_1b", {}, 8),
         ("l8b_b1", "llama3_1_8b", {}, 1), ("l1b_mqa_b8", "llama3_2_1b", {"n_kv_heads": 1}, 8),
         ("d64_w768_b8", "llama3_2_1b", dict(n_layers=64, d_model=768, n_heads=12, n_kv_heads=4,
                                             head_dim=64, ffn_dim=2048), 8),
         ("d16_w768_b8", "llama3_2_1b", dict(n_layers=16, d_model=768, n_heads=12, n_kv_heads=4,
                                             head_dim=64, ffn_dim=2048), 8),
         ("d64_w768_b1", "llama3_2_1b", dict(n_layers=64, d_model=768, n_heads=12, n_kv_heads=4,
                                             head_dim=64, ffn_dim=2048), 1)]


def logits(preset, over, B, pdl):
    cfg = ModelConfig.from_name(preset, **over).resolved("cuda")
    with switches.use(pdl=pdl, autotune=os.environ.get("AUTOTUNE", "1") == "1"):
        model = Transformer.build(cfg, "cuda", seed=0)
        gen = Generator(model, B, 512 + 9, "cudagraph")
        g = torch.Generator(device="cuda").manual_seed(1)
        prompt = torch.randint(0, cfg.vocab_size, (B, 512), device="cuda", generator=g)
        tok = gen.prefill(prompt).argmax(-1, keepdim=True)
        out = []
        for _ in range(8):
            lg = gen.decode(tok)
            out.append(lg.float().cpu())
            tok = lg.argmax(-1, keepdim=True)
    del model, gen
    torch.cuda.empty_cache()
    return torch.stack(out)


res = {"device": torch.cuda.get_device_name(0), "cases": []}
for name, preset, over, B in CASES:
    a, b = logits(preset, over, B, True), logits(preset, over, B, False)
    r = {"case": name, "pdl_nonfinite": int((~torch.isfinite(a)).sum()),
         "nopdl_nonfinite": int((~torch.isfinite(b)).sum()),
         "max_abs_diff": float((a - b).abs().nan_to_num(float("inf")).max()),
         "identical": bool(torch.equal(a, b)),
         "step_max_abs_diff": [float(x) for x in (a - b).abs().nan_to_num(float("inf"))
                               .flatten(1).max(1).values],
         "same_tokens": [bool(x) for x in (a.argmax(-1) == b.argmax(-1)).all(-1)]}
    res["cases"].append(r)
    print(json.dumps(r), flush=True)
out = Path(os.environ.get("OUT", "out"))
out.mkdir(parents=True, exist_ok=True)
(out / "pdl_check.json").write_text(json.dumps(res, indent=1))
