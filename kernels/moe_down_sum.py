"""A decode step's MoE down projection with each token's ``k`` slots summed in the same launch.

``kernels.moe_gemm.moe_down`` writes one row per (token, choice) slot, ``[M k, d]``, and a torch
reduction then sums each token's ``k`` rows: at batch 1 that reduction is a launch of its own a
layer (OLMoE-1B-7B: 115 us of a 1.47 ms step over 16 layers, each kernel cold under ncu;
``results/reference/moe_h100.md``). Here one program owns ``BLOCK_N`` output channels of one
token and walks its ``k`` experts: for each, the dot of the slot's activation ``[Fe]`` with the
expert's ``w2`` rows ``[BLOCK_N, Fe]`` (float32, on the CUDA cores: a decode token is one row),
rounded and scaled by the routing weight as ``moe_down`` does, then added in float32 to the
token's sum, rounded once at the end (``reference``'s numerics: the bf16 slot rows summed in
float32).

Minimum DRAM bytes of a call: the touched experts' ``w2`` rows, ``d Fe`` each (an expert two of the
``M`` tokens share is read twice, the second time from L2 when they run together), plus ``M k
Fe`` activations. Meant for a few tokens (decode); a prefill's slots go through ``moe_down``.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _down_sum_kernel(a_ptr, w_ptr, idx_ptr, rw_ptr, out_ptr, F, N,
                     TOPK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr):
    m = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    dt = out_ptr.dtype.element_ty
    total = tl.zeros([BLOCK_N], tl.float32)
    for j in tl.static_range(TOPK):
        s = m * TOPK + j
        e = tl.load(idx_ptr + s).to(tl.int64)
        rw = tl.load(rw_ptr + s).to(tl.float32)
        w_rows = w_ptr + e * N * F + offs_n.to(tl.int64)[:, None] * F
        a_row = a_ptr + s.to(tl.int64) * F
        acc = tl.zeros([BLOCK_N], tl.float32)
        for f0 in range(0, F, BLOCK_F):
            offs_f = f0 + tl.arange(0, BLOCK_F)
            fmask = offs_f < F
            a = tl.load(a_row + offs_f, mask=fmask, other=0.0).to(tl.float32)
            w = tl.load(w_rows + offs_f[None, :], mask=nmask[:, None] & fmask[None, :],
                        other=0.0).to(tl.float32)
            acc += tl.sum(w * a[None, :], axis=1)
        total += (acc.to(dt).to(tl.float32) * rw).to(dt).to(tl.float32)
    tl.store(out_ptr + m * N + offs_n, total.to(dt), mask=nmask)


BLOCK_N = 16  # output channels a program owns (OLMoE's d = 2048: 128 programs a token)
BLOCK_F = 256  # hidden units a loop step reads (16-byte vector loads of bf16 rows)


def down_sum(act: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor
             ) -> torch.Tensor:
    """The routed experts' weighted sum from the up projection's activations.

    Args:
        act: ``[M k, Fe]`` slot activations (``kernels.moe_gemm.moe_up``; slot ``t k + j`` is
            token ``t``'s ``j``-th choice), contiguous.
        w2: ``[E, d, Fe]`` experts' down projections, contiguous.
        weights: ``[M, k]`` routing weights. idx: ``[M, k]`` experts (int).

    Returns:
        ``[M, d]`` in ``act``'s dtype.

    Raises:
        ValueError: shapes that do not agree (named).
    """
    M, k = idx.shape
    E, d, F = w2.shape
    if act.shape != (M * k, F):
        raise ValueError(f"act must be [M k, Fe] = {[M * k, F]}, got {list(act.shape)}")
    if weights.shape != (M, k):
        raise ValueError(f"weights must be [M, k] = {[M, k]}, got {list(weights.shape)}")
    out = torch.empty(M, d, device=act.device, dtype=act.dtype)
    interp = act.device.type == "cpu" or os.environ.get("TRITON_INTERPRET") == "1"
    _down_sum_kernel[(M, triton.cdiv(d, BLOCK_N))](
        act.contiguous(), w2.contiguous(), idx.reshape(-1).contiguous(),
        weights.reshape(-1).contiguous(), out, F, d, TOPK=k, BLOCK_N=BLOCK_N,
        BLOCK_F=64 if interp else BLOCK_F, num_warps=4)
    return out


def reference(act: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor
              ) -> torch.Tensor:
    """PyTorch reference: each slot through its expert's ``w2``, rounded, scaled by its weight
    and rounded (``kernels.moe_gemm.moe_down``), the ``k`` slots of a token summed in float32."""
    M, k = idx.shape
    flat = idx.reshape(-1)
    y = torch.einsum("sf,sdf->sd", act.float(), w2[flat].float()).to(act.dtype)
    y = (y.float() * weights.reshape(-1, 1).float()).to(act.dtype)
    return y.float().view(M, k, -1).sum(1).to(act.dtype)
