"""How much of a batch-1 MoE decode step do the levers of issue 38 item 2 take off?

    python -m bench.moe_step_probe OUT.csv [DESIGNS] [SET]

Decode steps of the shipped MoE presets (random bf16 weights, the router as built, prompt 512,
``kernels=triton``) in CUDA graphs (``Generator.decode_greedy``, ``bench.tpot``), with the two
levers of ``zoo.experts`` on and off: the router's GEMM, routing and sort in one launch
(``kernels.moe_route.ROUTER_ROUTE_MAX_TOKENS``, 0 = off: the router's GEMM then ``route_align``)
and each token's slots summed inside the down GEMM's launch
(``kernels.moe_gemm.SUM_IN_DOWN_MAX_TOKENS``, 0 = off: a torch sum after); and QK-norm in one
launch (``kernels.qk_norm``; off: the two RMSNorm launches, with q, k and v copied dense first for
several rows, as before it). ms per step: the median over 3 rounds, the variants alternating,
each a fresh Generator (graphs captured in an untimed run, then 64 timed steps). DESIGNS:
comma-separated ``preset:batch`` (default OLMoE-1B-7B at 1 and 8, Qwen3-30B-A3B at 1). SET:
``levers`` (default: the variants above) or ``pdl``: the shipped step against the same with the
MoE kernels launched without programmatic dependent launch (``kernels.moe_gemm.MOE_PDL``).
"""

from __future__ import annotations

import json
import sys
import time

import torch

from bench.gpu import write_rows
from bench.tpot import tpot_runs
from kernels import moe_gemm, moe_route, ops, rmsnorm

DEFAULT = "olmoe_1b_7b:1,olmoe_1b_7b:8,qwen3_30b_a3b:1"
PROMPT = 512
# variant -> (ROUTER_ROUTE_MAX_TOKENS, SUM_IN_DOWN_MAX_TOKENS, QK-norm in one launch, MOE_PDL)
SETS = {"levers": {"none": (0, 0, False, False), "router_route": (8, 0, False, False),
                   "sum_in_down": (0, 8, False, False),
                   "router_route + sum_in_down": (8, 8, False, False),
                   "all three": (8, 8, True, False)},
        "pdl": {"no MoE PDL": (8, 8, True, False), "shipped (MoE PDL)": (8, 8, True, True)}}
QK_NORM = ops.qk_norm


def _qk_two_launches(qkv, q_dim, kv_dim, wq, wk, eps, head_dim=0, one_p=False):
    """QK-norm as before ``kernels.qk_norm``: a RMSNorm launch each for q and k (their strided
    rows copied dense first), v made dense (HF's scale only: the presets')."""
    q, k, v = qkv.split([q_dim, kv_dim, kv_dim], dim=-1)
    if head_dim:
        q, k = q.unflatten(-1, (-1, head_dim)), k.unflatten(-1, (-1, head_dim))
    q, k = rmsnorm.rmsnorm(q, wq, eps), rmsnorm.rmsnorm(k, wk, eps)
    if head_dim:
        q, k = q.flatten(-2), k.flatten(-2)
    return q, k, v.contiguous()


def _ms(model, B, steps=64):
    from zoo import Generator

    gen = Generator(model, B, PROMPT + steps + 8, "cudagraph")
    prompt = torch.randint(0, model.cfg.vocab_size, (B, PROMPT), device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(1))
    ms = tpot_runs(gen, prompt, steps, 2)[0]
    del gen
    torch.cuda.empty_cache()
    return ms


def main(out: str, designs: str = DEFAULT, variant_set: str = "levers") -> None:
    from zoo import ModelConfig, Transformer

    VARIANTS = SETS[variant_set]
    shipped = (moe_route.ROUTER_ROUTE_MAX_TOKENS, moe_gemm.SUM_IN_DOWN_MAX_TOKENS,
               moe_gemm.MOE_PDL)
    base_name = next(iter(VARIANTS))
    rows = []
    for item in designs.split(","):
        preset, B = item.split(":")
        B = int(B)
        t0 = time.time()
        cfg = ModelConfig.from_name(preset).resolved("cuda")
        model = Transformer.build(cfg, "cuda", seed=0)
        times: dict = {v: [] for v in VARIANTS}
        try:
            for _ in range(3):
                for v, (router, summed, qk, pdl) in VARIANTS.items():
                    moe_route.ROUTER_ROUTE_MAX_TOKENS, moe_gemm.SUM_IN_DOWN_MAX_TOKENS = router, summed
                    moe_gemm.MOE_PDL = pdl
                    ops.qk_norm = QK_NORM if qk else _qk_two_launches
                    times[v].append(_ms(model, B))
        finally:
            (moe_route.ROUTER_ROUTE_MAX_TOKENS, moe_gemm.SUM_IN_DOWN_MAX_TOKENS,
             moe_gemm.MOE_PDL) = shipped
            ops.qk_norm = QK_NORM
        base = sorted(times[base_name])[1]
        for v, t in times.items():
            med = sorted(t)[1]
            rows.append(dict(design=preset, batch=B, variant=v, ms=round(med, 4),
                             change_pct=round(100 * (med / base - 1), 2),
                             ms_all=json.dumps([round(x, 4) for x in t]),
                             wall_s=round(time.time() - t0)))
            print(json.dumps(rows[-1]), flush=True)
        write_rows(out, rows)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else DEFAULT,
         sys.argv[3] if len(sys.argv) > 3 else "levers")
