"""A weight pulled into the L2 cache ahead of its GEMV, while a latency-bound kernel leaves DRAM idle.

A decode step alternates kernels that stream weights at the bandwidth (the FFN's GEMVs, the LM
head) with kernels that are bound by latency, not bytes: decode attention over a small cache
(the main job's MQA design, batch 8 x 4k: 8.4 MB in 10.3 us, 0.28 of the H100's copy bandwidth,
``results/reference/decode_levers_h100.md``). The out_proj GEMV that follows it reads its weight
cold from DRAM (2048 x 2048 bf16 at 8 rows: 6.6 us cold against 4.0 warm). This kernel issues
``prefetch.global.L2`` (PTX ISA, "prefetch": a hint; no data comes back, no thread waits) for
each 128-byte line of a tensor, spread over its programs, and exits: the lines arrive while the
next kernels run, and the GEMV finds them in L2.

Under programmatic dependent launch (``pdl``; ``kernels.gemv``) it lets the next kernel launch
at once and then waits for the previous one before it ends, so the next kernel's own wait covers
the kernel before this one too (it reads and writes nothing, so it needs no wait of its own).

Minimum DRAM traffic: the tensor's bytes (moved from the GEMV to this launch). The interpreter
and a CPU tensor: nothing to do (no cache to fill), the call returns.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

LINE = 128  # bytes of an L2 line (sector groups of 4 x 32 B), H100 / H200
BLOCK = 256  # lines a program's threads issue per loop step
PROGRAMS = 132  # one per SM of an H100 / H200 (a hint: fewer programs issue more lines each)


@triton.jit
def _prefetch_l2(ptrs):
    # one prefetch.global.L2 per element's address; the int32 result is a dummy
    return tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs],
                                     dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _prefetch_kernel(base_ptr, n_lines, per_program, LINE_ELEMS: tl.constexpr,
                     BLOCK_L: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # let the next kernel launch now (it waits for this one's end)
        tl.extra.cuda.gdc_launch_dependents()
    first = tl.program_id(0) * per_program
    for i in range(0, per_program, BLOCK_L):
        line = tl.minimum(first + i + tl.arange(0, BLOCK_L), n_lines - 1)  # a repeat: harmless
        _prefetch_l2(base_ptr + line.to(tl.int64) * LINE_ELEMS)
    if PDL:  # end only after the kernel before: the next kernel's wait then covers it
        tl.extra.cuda.gdc_wait()


def prefetch_l2(t: torch.Tensor, nbytes: int | None = None, pdl: bool = False) -> None:
    """Issue L2 prefetches for the first ``nbytes`` of ``t`` (default: all of it).

    Args:
        t: a contiguous tensor on the GPU (a weight ``[N, K]``); a CPU tensor or the Triton
            interpreter: nothing is launched.
        nbytes: bytes from the start of ``t``, at most ``t.nbytes``.
        pdl: launch with programmatic dependent launch (``kernels.gemv.pdl_supported``).

    Raises:
        ValueError: ``t`` not contiguous, or ``nbytes`` outside ``[0, t.nbytes]``.
    """
    if not t.is_contiguous():
        raise ValueError("prefetch_l2 needs a contiguous tensor")
    n = t.nbytes if nbytes is None else int(nbytes)
    if not 0 <= n <= t.nbytes:
        raise ValueError(f"prefetch_l2: nbytes={n} outside [0, {t.nbytes}]")
    if t.device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1" or n == 0:
        return
    lines = triton.cdiv(n, LINE)
    programs = min(PROGRAMS, triton.cdiv(lines, BLOCK))
    per = triton.cdiv(triton.cdiv(lines, programs), BLOCK) * BLOCK
    _prefetch_kernel[(programs,)](t, lines, per, LINE_ELEMS=LINE // t.element_size(),
                                  BLOCK_L=BLOCK, PDL=pdl, num_warps=4,
                                  **({"launch_pdl": True} if pdl else {}))
