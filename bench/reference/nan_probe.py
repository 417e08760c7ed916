"""How often a graphed decode ends in non-finite logits, and under which kernel switches (the
held-out pairs ``d64_w768`` on the H200 and ``mis_fp8_8k`` on the H100 each failed once with
"decode produced non-finite logits" and ran on the other GPU: a race is the suspect).

For each case and switch set: prefill, then REPEATS decode loops of the trial's length from the
same position (as ``sweep.measure.trial`` times them), each step's logits checked; prints the
loops with a non-finite step and the first such step. ``$OUT/nan_probe.json``.

    python3 bench/reference/nan_probe.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels import switches  # noqa: E402
from zoo import Generator, ModelConfig, Transformer  # noqa: E402

REPEATS = int(os.environ.get("REPEATS", "20"))
CASES = [  # name, preset, overrides, batch, prompt, new tokens
    ("d64_w768", "llama3_2_1b", dict(n_layers=64, d_model=768, n_heads=12, n_kv_heads=4,
                                     head_dim=64, ffn_dim=2048), 8, 1024, 64),
    ("mis_fp8_8k", "mistral_7b_v0_3", dict(kv_dtype="fp8_e4m3"), 4, 8192, 64),
    # 2026-11-25, H200, today's kernels: non-finite logits in the held-out even half
    ("mis_b12_p768", "mistral_7b_v0_3", {}, 12, 768, 48),
    ("l1b_fp8_32k", "llama3_2_1b", dict(kv_dtype="fp8_e4m3"), 4, 32768, 32),
]
if os.environ.get("ONLY"):  # ONLY=name,name: these cases
    CASES = [c for c in CASES if c[0] in os.environ["ONLY"].split(",")]
VARIANTS = [("default", {}), ("no_pdl", {"pdl": False}),
            ("no_fold", {"rope_in_attention": False}),
            ("no_gemv_ahead", {"gemv_w_ahead": False, "gemv_prefetch": False}),
            ("no_autotune", {"autotune": False})]
if os.environ.get("VARIANTS"):  # VARIANTS=default,no_pdl: these variants
    VARIANTS = [v for v in VARIANTS if v[0] in os.environ["VARIANTS"].split(",")]


def run(preset, over, B, T, N, sw):
    cfg = ModelConfig.from_name(preset, **over).resolved("cuda")
    with switches.use(**sw):
        model = Transformer.build(cfg, "cuda", seed=0)
        gen = Generator(model, B, T + N, "cudagraph")
        g = torch.Generator(device="cuda").manual_seed(1)
        prompt = torch.randint(0, cfg.vocab_size, (B, T), device="cuda", generator=g)
        first = gen.prefill(prompt).argmax(-1, keepdim=True)
        bad = []
        for r in range(REPEATS):
            gen.pos, tok = T, first
            flags = []
            for _ in range(N - 1):
                logits = gen.decode(tok)
                flags.append(torch.isfinite(logits).all())
                tok = logits.argmax(-1, keepdim=True)
            ok = torch.stack(flags).cpu()
            if not ok.all():
                bad.append([r, int((~ok).nonzero()[0])])
    del model, gen
    torch.cuda.empty_cache()
    return bad


res = {"device": torch.cuda.get_device_name(0), "repeats": REPEATS, "runs": []}
for name, preset, over, B, T, N in CASES:
    for vname, sw in VARIANTS:
        t0 = time.time()
        try:
            bad = run(preset, over, B, T, N, sw)
            r = {"case": name, "variant": vname, "bad_loops": bad}
        except Exception as e:  # noqa: BLE001
            r = {"case": name, "variant": vname, "error": f"{type(e).__name__}: {e}"[:300]}
        r["wall_s"] = round(time.time() - t0, 1)
        res["runs"].append(r)
        print(json.dumps(r), flush=True)
out = Path(os.environ.get("OUT", "out"))
out.mkdir(parents=True, exist_ok=True)
from kernels import tuning  # noqa: E402

res["tuned_here"] = tuning._new  # the tile choices this process made (shapes new to the files)
(out / "nan_probe.json").write_text(json.dumps(res, indent=1, default=str))
