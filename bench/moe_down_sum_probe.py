"""Does the MoE down projection with the slots summed in one launch shorten the decode step?

    python -m bench.moe_down_sum_probe OUT.csv [DESIGNS]

Decode steps of the shipped MoE presets (random bf16 weights, the router as built, prompt 512,
``kernels=triton``) in CUDA graphs (``Generator.decode_greedy``), with ``zoo.experts``'s
``DOWN_SUM_TOKENS`` at 0 (the shipped path: grouped ``moe_down``, then a torch sum of each token's
slots) and at 64 (``kernels.moe_down_sum``: one launch). ms per step: the median over 3 rounds,
the two alternating, each a fresh Generator (graph captured in an untimed run, then 64 timed
steps). DESIGNS: comma-separated ``preset:batch`` (default OLMoE-1B-7B at 1 and 8, Qwen3-30B-A3B at 1).
"""

from __future__ import annotations

import csv
import json
import sys
import time

import torch

from bench.tpot import tpot_runs
from zoo import experts as X

DEFAULT = "olmoe_1b_7b:1,olmoe_1b_7b:8,qwen3_30b_a3b:1"
PROMPT = 512


def _ms(model, B, steps=64):
    from zoo import Generator

    gen = Generator(model, B, PROMPT + steps + 8, "cudagraph")
    prompt = torch.randint(0, model.cfg.vocab_size, (B, PROMPT), device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(1))
    ms = tpot_runs(gen, prompt, steps, 2)[0]
    del gen
    torch.cuda.empty_cache()
    return ms


def main(out: str, designs: str = DEFAULT) -> None:
    from zoo import ModelConfig, Transformer

    rows = []
    for item in designs.split(","):
        preset, B = item.split(":")
        B = int(B)
        t0 = time.time()
        cfg = ModelConfig.from_name(preset).resolved("cuda")
        model = Transformer.build(cfg, "cuda", seed=0)
        times = {0: [], 64: []}
        for _ in range(3):
            for v in times:
                X.DOWN_SUM_TOKENS = v
                times[v].append(_ms(model, B))
        X.DOWN_SUM_TOKENS = 0
        med = {v: sorted(t)[1] for v, t in times.items()}
        row = dict(design=preset, batch=B, ms_grouped=round(med[0], 4),
                   ms_down_sum=round(med[64], 4),
                   gain_pct=round(100 * (med[0] / med[64] - 1), 2),
                   ms_all_grouped=json.dumps([round(x, 4) for x in times[0]]),
                   ms_all_down_sum=json.dumps([round(x, 4) for x in times[64]]),
                   wall_s=round(time.time() - t0))
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else DEFAULT)
