"""Does pulling a weight into L2 during a latency-bound kernel shorten the decode step?

    python -m bench.l2_prefetch_probe OUT.csv [ROUNDS]

Decode steps of the main job's designs (batch 8 x 4k, n_kv_heads 1 .. 32) and the bench's
shapes (Llama-3.2-1B and 3.1-8B at batch 1 and 8), in CUDA graphs (``Generator.decode_greedy``),
with ``kernels.l2_prefetch.prefetch_l2`` inserted into the block's decode path (patched over
``Attention.skinny`` and ``FeedForward.skinny`` here; nothing shipped changes):

- ``base``: the shipped step;
- ``wo_attn``: the out_proj weight prefetched by a launch between the qkv GEMV and decode attention;
- ``wo_qkv``: the same launch before the qkv GEMV;
- ``qkv_w2``: the next layer's qkv weight prefetched by a launch before the w2 GEMV;
- ``wo_attn_qkv_w2``: both.

ms per step: the median over ``ROUNDS`` rounds (variants alternating; each a fresh Generator, its
graph captured in an untimed run, then one timed run of 64 steps). Then, with fixed tiles
(``switches.autotune=False``), the logits of 8 greedy steps of each variant against ``base``
(bit-identical: a prefetch moves no data).
"""

from __future__ import annotations

import json
import sys
import time

import torch

from bench.gpu import write_rows
from bench.tpot import tpot_runs
from kernels import switches
from kernels.l2_prefetch import prefetch_l2
from zoo import attention as A
from zoo import model as M

VARIANTS = {"base": (None, False), "wo_attn": ("attn", False), "wo_qkv": ("qkv", False),
            "qkv_w2": (None, True), "wo_attn_qkv_w2": ("attn", True)}
DESIGNS = [  # name, preset, overrides, batch, prompt
    ("g32_b8_4k", "llama3_2_1b", {"n_kv_heads": 1}, 8, 4096),
    ("g16_b8_4k", "llama3_2_1b", {"n_kv_heads": 2}, 8, 4096),
    ("g8_b8_4k", "llama3_2_1b", {"n_kv_heads": 4}, 8, 4096),
    ("g4_b8_4k", "llama3_2_1b", {"n_kv_heads": 8}, 8, 4096),
    ("g1_b8_4k", "llama3_2_1b", {"n_kv_heads": 32}, 8, 4096),
    ("1b_b1_512", "llama3_2_1b", {}, 1, 512),
    ("8b_b1_512", "llama3_1_8b", {}, 1, 512),
    ("8b_b8_512", "llama3_1_8b", {}, 8, 512),
]
STATE = {"wo": None, "qkv_next": False}
_ATTN, _FFN = A.Attention.skinny, M.FeedForward.skinny


def _attn_skinny(self, x, norm, residual, rope, input_pos):
    ops = A.ops
    if STATE["wo"] == "qkv":
        prefetch_l2(self.wo.weight, pdl=self.pdl)
    qkv, h = ops.linear(x, self.wqkv, "norm", norm, residual, pdl_trigger=False)
    if STATE["wo"] == "attn":
        prefetch_l2(self.wo.weight, pdl=self.pdl)
    y = self.attend(qkv, rope, input_pos)
    return ops.linear(y, self.wo), h


def _ffn_skinny(self, o, norm, residual):
    ops = M.ops
    g, h = ops.linear(o, self.w13, "norm", norm, residual)
    nxt = getattr(self, "_next_w", None)
    if STATE["qkv_next"] and nxt is not None:
        prefetch_l2(nxt, pdl=self._pdl)
    return ops.linear(g, self.w2, self.kind.w2_prologue), h


def _link(model) -> None:
    layers = list(model.layers)
    for i, blk in enumerate(layers):
        nxt = layers[i + 1].attention.wqkv.weight if i + 1 < len(layers) else None
        blk.feed_forward._next_w = nxt


def _measure(model, B, T, steps, keep_logits=False):
    from zoo import Generator

    cfg = model.cfg
    gen = Generator(model, B, T + steps + 8, "cudagraph")
    for blk in model.layers:
        blk.feed_forward._pdl = blk.attention.pdl
    g = torch.Generator(device="cuda").manual_seed(1)
    prompt = torch.randint(0, cfg.vocab_size, (B, T), device="cuda", generator=g)
    if keep_logits:
        gen.pos = 0
        tok = gen.prefill(prompt).argmax(-1, keepdim=True)
        out = []
        for _ in range(steps):
            tok = gen.decode_greedy(tok)
            out.append(gen.last_logits.float().cpu())
        del gen
        return torch.stack(out)
    ms = tpot_runs(gen, prompt, steps, 2)
    del gen
    return ms[0]


def compare(designs, variants: dict, apply, out_csv: str, rounds: int = 3) -> list[dict]:
    """ms per step of each design under each variant (``apply(variant)`` sets it), the variants
    alternating over ``rounds``, medians and gains against the first; with fixed tiles, the
    logits of 8 greedy steps against the first variant's (MQA and the 1B at batch 1). Rows
    written to ``out_csv`` after each design."""
    from zoo import ModelConfig, Transformer

    rows = []
    first = next(iter(variants))
    for name, preset, over, B, T in designs:
        t0 = time.time()
        cfg = ModelConfig.from_name(preset, **over).resolved("cuda")
        model = Transformer.build(cfg, "cuda", seed=0)
        _link(model)
        times = {v: [] for v in variants}
        for _ in range(rounds):
            for v in variants:
                apply(v)
                times[v].append(_measure(model, B, T, 64))
                torch.cuda.empty_cache()
        row = dict(design=name, batch=B, prompt=T)
        med = {v: sorted(t)[len(t) // 2] for v, t in times.items()}
        for v in variants:
            row[f"ms_{v}"] = round(med[v], 4)
            row[f"gain_pct_{v}"] = round(100 * (med[first] / med[v] - 1), 2)
        if name in ("g32_b8_4k", "1b_b1_512"):
            with switches.use(autotune=False):
                ref = None
                for v in variants:
                    apply(v)
                    lg = _measure(model, B, T, 8, keep_logits=True)
                    ref = lg if ref is None else ref
                    row[f"identical_{v}"] = bool(torch.equal(ref, lg))
        for v in variants:
            row[f"ms_all_{v}"] = json.dumps([round(t, 4) for t in times[v]])
        row["wall_s"] = round(time.time() - t0)
        rows.append(row)
        print(json.dumps({k: x for k, x in row.items() if "all" not in k}), flush=True)
        write_rows(out_csv, rows)
        del model
        torch.cuda.empty_cache()
    return rows


def main(out_csv: str, rounds: int = 3) -> None:
    def apply(v):
        STATE["wo"], STATE["qkv_next"] = VARIANTS[v]

    A.Attention.skinny, M.FeedForward.skinny = _attn_skinny, _ffn_skinny
    compare(DESIGNS, VARIANTS, apply, out_csv, rounds)
    STATE["wo"], STATE["qkv_next"] = None, False
    A.Attention.skinny, M.FeedForward.skinny = _ATTN, _FFN


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
