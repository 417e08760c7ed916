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

import sys

import torch
import triton
import triton.language as tl

from bench import l2_prefetch_probe as l2p
from kernels.l2_prefetch import _prefetch_l2
from zoo import attention as A

MB = 1 << 20
VARIANTS = {"base": (0, 0), "w13_16": (16 * MB, 0), "w13_32": (32 * MB, 0),
            "w13_16_w2_8": (16 * MB, 8 * MB)}
# the prefetch probe's designs but Llama-3.1-8B at batch 1
DESIGNS = [d for d in l2p.DESIGNS if d[0] != "8b_b1_512"]
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


def main(out_csv: str, rounds: int = 3) -> None:
    def apply(v):
        STATE["w13"], STATE["w2"] = VARIANTS[v]

    A.Attention.skinny = _attn_skinny
    STATE["side"] = torch.cuda.Stream()
    link = l2p._link
    l2p._link = lambda model: (link(model), _link(model))
    try:
        l2p.compare(DESIGNS, VARIANTS, apply, out_csv, rounds)
    finally:
        l2p._link = link
        STATE["w13"], STATE["w2"] = 0, 0
        A.Attention.skinny = _ATTN


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
