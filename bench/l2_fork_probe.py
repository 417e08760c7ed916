"""Does a weight pulled into L2 from a parallel branch of the step's graph shorten the decode step?

    python -m bench.l2_fork_probe OUT.csv [ROUNDS]

``bench.l2_prefetch_probe`` (section 6 of ``results/reference/decode_levers_h100.md``) put the
prefetch launch into the chain of kernels and lost about a launch a layer. Here it runs on a side
stream, forked before each layer's qkv GEMV (captured as a parallel branch of the CUDA graph:
nothing in the chain waits for it; the branch is joined once, after the last layer), while the
qkv GEMV, decode attention and out_proj (latency-bound at few KV heads: DRAM mostly idle) run.
It prefetches into L2 a prefix of the same layer's FFN weights, per program's slice: the first
``F`` of each row of ``w13`` (whose GEMV reads its rows from the first column on) and of each
``K / SPLIT`` segment of ``w2`` (8 split-K segments on the main job's shape), so every GEMV
program finds its first tiles warm. Variants by bytes a layer (``F`` = bytes / weight bytes):

- ``base``: the shipped step;
- ``w13_16``, ``w13_32``: 16 / 32 MB of w13;
- ``w13_16_w2_8``: 16 MB of w13 and 8 MB of w2.

ms per step: the median over ``ROUNDS`` rounds (variants alternating; each a fresh Generator,
its graph captured in an untimed run, then one timed run of 64 steps). Then, with fixed tiles,
the logits of 8 greedy steps of each variant against ``base`` (a prefetch moves no data).
"""

from __future__ import annotations

import json
import sys
import time

import torch
import triton
import triton.language as tl

from bench.gpu import write_rows
from bench.tpot import tpot_runs
from kernels import switches
from kernels.l2_prefetch import _prefetch_l2
from zoo import attention as A

MB = 1 << 20
VARIANTS = {"base": (0, 0), "w13_16": (16 * MB, 0), "w13_32": (32 * MB, 0),
            "w13_16_w2_8": (16 * MB, 8 * MB)}
DESIGNS = [  # name, preset, overrides, batch, prompt
    ("g32_b8_4k", "llama3_2_1b", {"n_kv_heads": 1}, 8, 4096),
    ("g16_b8_4k", "llama3_2_1b", {"n_kv_heads": 2}, 8, 4096),
    ("g8_b8_4k", "llama3_2_1b", {"n_kv_heads": 4}, 8, 4096),
    ("g4_b8_4k", "llama3_2_1b", {"n_kv_heads": 8}, 8, 4096),
    ("g1_b8_4k", "llama3_2_1b", {"n_kv_heads": 32}, 8, 4096),
    ("1b_b1_512", "llama3_2_1b", {}, 1, 512),
    ("8b_b8_512", "llama3_1_8b", {}, 8, 512),
]
W2_SEGMENTS = 8
STATE = {"w13": 0, "w2": 0, "side": None}
_ATTN = A.Attention.skinny
LINE = 128


@triton.jit
def _prefetch_prefix(base, n_rows, row_elems, seg_elems, n_seg, lines_per_seg, per_program,
                     LINE_ELEMS: tl.constexpr, BLOCK_L: tl.constexpr):
    # the first lines_per_seg lines of each of a row's n_seg segments, for every row
    per_row = n_seg * lines_per_seg
    total = n_rows * per_row
    first = tl.program_id(0) * per_program
    for i in range(0, per_program, BLOCK_L):
        idx = tl.minimum(first + i + tl.arange(0, BLOCK_L), total - 1).to(tl.int64)
        row = idx // per_row
        rem = idx % per_row
        off = row * row_elems + (rem // lines_per_seg) * seg_elems + (rem % lines_per_seg) * LINE_ELEMS
        _prefetch_l2(base + off)


def prefetch_prefix(w: torch.Tensor, nbytes: int, n_seg: int) -> None:
    """L2 prefetches for about ``nbytes`` of ``w [N, K]``: the same prefix of each of a row's
    ``n_seg`` segments."""
    if nbytes <= 0:
        return
    N, K = w.shape
    seg_bytes = K * w.element_size() // n_seg
    frac = min(1.0, nbytes / w.nbytes)
    lines = max(1, int(frac * seg_bytes / LINE))
    total = N * n_seg * lines
    programs = min(132, triton.cdiv(total, 256))
    per = triton.cdiv(triton.cdiv(total, programs), 256) * 256
    le = LINE // w.element_size()
    _prefetch_prefix[(programs,)](w, N, K, K // n_seg, n_seg, lines, per, LINE_ELEMS=le,
                                  BLOCK_L=256, num_warps=4)


def _attn_skinny(self, x, norm, residual, rope, input_pos):
    if STATE["w13"] or STATE["w2"]:
        side = STATE["side"]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            prefetch_prefix(self._w13, STATE["w13"], 1)
            prefetch_prefix(self._w2, STATE["w2"], W2_SEGMENTS)
        if self._last:  # join the branch once, after the last layer's fork
            torch.cuda.current_stream().wait_stream(side)
    return _ATTN(self, x, norm, residual, rope, input_pos)


def _link(model) -> None:
    layers = list(model.layers)
    for i, blk in enumerate(layers):
        blk.attention._w13 = blk.feed_forward.w13.weight
        blk.attention._w2 = blk.feed_forward.w2.weight
        blk.attention._last = i == len(layers) - 1


def _measure(model, B, T, steps, keep_logits=False):
    from zoo import Generator

    cfg = model.cfg
    gen = Generator(model, B, T + steps + 8, "cudagraph")
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


def main(out_csv: str, rounds: int = 3) -> None:
    from zoo import ModelConfig, Transformer

    A.Attention.skinny = _attn_skinny
    STATE["side"] = torch.cuda.Stream()
    rows = []
    for name, preset, over, B, T in DESIGNS:
        t0 = time.time()
        cfg = ModelConfig.from_name(preset, **over).resolved("cuda")
        model = Transformer.build(cfg, "cuda", seed=0)
        _link(model)
        times = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for v, (a, b) in VARIANTS.items():
                STATE["w13"], STATE["w2"] = a, b
                times[v].append(_measure(model, B, T, 64))
                torch.cuda.empty_cache()
        row = dict(design=name, batch=B, prompt=T)
        med = {v: sorted(t)[len(t) // 2] for v, t in times.items()}
        for v in VARIANTS:
            row[f"ms_{v}"] = round(med[v], 4)
            row[f"gain_pct_{v}"] = round(100 * (med["base"] / med[v] - 1), 2)
        if name in ("g32_b8_4k", "1b_b1_512"):
            with switches.use(autotune=False):
                ref = None
                for v, (a, b) in VARIANTS.items():
                    STATE["w13"], STATE["w2"] = a, b
                    lg = _measure(model, B, T, 8, keep_logits=True)
                    ref = lg if ref is None else ref
                    row[f"identical_{v}"] = bool(torch.equal(ref, lg))
        for v in VARIANTS:
            row[f"ms_all_{v}"] = json.dumps([round(t, 4) for t in times[v]])
        row["wall_s"] = round(time.time() - t0)
        rows.append(row)
        print(json.dumps({k: x for k, x in row.items() if "all" not in k}), flush=True)
        write_rows(out_csv, rows)
        del model
        torch.cuda.empty_cache()
    STATE["w13"], STATE["w2"] = 0, 0
    A.Attention.skinny = _ATTN


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
