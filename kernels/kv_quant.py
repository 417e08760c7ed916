"""Quantize-on-write for the KV cache: int8 or fp8 e4m3, one scale per (sequence, KV head, token).

For each new token and KV head, ``scale = max(|x|) / qmax`` over the head_dim channels
(qmax 127 for int8, 448 for fp8 e4m3), ``q = x / scale`` rounded (int8: half away from zero) or
cast (fp8), written at the token's position; the scale goes to the float32 scale buffer
(symmetric per-token quantization, as KIVI's value cache, arXiv:2402.02750, and TensorRT-LLM's
int8/fp8 KV cache). Dequantization is ``q * scale``. Divisions are IEEE-rounded (``div_rn``) so the
kernel matches the PyTorch reference bit for bit on the GPU.

One program handles ``BLOCK_T`` tokens of one (sequence, KV head): a ``[BLOCK_T, D]`` tile.
Minimum DRAM traffic: read ``x`` (2 bytes/element), write 1 byte/element and 4 bytes/token.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

QMAX = {"int8": 127.0, "fp8_e4m3": 448.0}


@triton.jit
def _quant_kernel(x_ptr, out_ptr, scale_ptr, pos_ptr, T, n_heads,
                  s_xb, s_xh, s_xt, s_ob, s_oh, s_os, s_sb, s_sh,
                  D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
                  QMAX_: tl.constexpr, IS_FP8: tl.constexpr):
    bh = tl.program_id(0)
    h = bh % n_heads
    b = (bh // n_heads).to(tl.int64)
    offs_t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    tmask = offs_t < T
    mask = tmask[:, None] & (offs_d < D)[None, :]
    x = tl.load(x_ptr + b * s_xb + h * s_xh + offs_t[:, None] * s_xt + offs_d[None, :],
                mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=1), QMAX_), 1e-12)
    y = tl.math.div_rn(x, scale[:, None])
    pos = tl.load(pos_ptr + offs_t, mask=tmask, other=0).to(tl.int64)
    dst = out_ptr + b * s_ob + h * s_oh + pos[:, None] * s_os + offs_d[None, :]
    if IS_FP8:
        tl.store(dst, y.to(tl.float8e4nv), mask=mask)
    else:
        r = tl.where(y >= 0, tl.floor(y + 0.5), -tl.floor(-y + 0.5))
        r = tl.minimum(tl.maximum(r, -QMAX_), QMAX_)
        tl.store(dst, r.to(tl.int8), mask=mask)
    tl.store(scale_ptr + b * s_sb + h * s_sh + pos, scale, mask=tmask)


def quantize_kv(x: torch.Tensor, out: torch.Tensor, scale: torch.Tensor,
                input_pos: torch.Tensor, kv_dtype: str) -> None:
    """Write ``x [B, Hkv, T, D]`` (any strides, last dim contiguous) into the quantized cache
    ``out [B, Hkv, S, D]`` and ``scale [B, Hkv, S]`` at positions ``input_pos [T]``, in place."""
    B, Hkv, T, D = x.shape
    assert x.stride(-1) == 1 and out.stride(-1) == 1
    BLOCK_T = min(32, triton.next_power_of_2(T))
    _quant_kernel[(B * Hkv, triton.cdiv(T, BLOCK_T))](
        x, out, scale, input_pos, T, Hkv, x.stride(0), x.stride(1), x.stride(2),
        out.stride(0), out.stride(1), out.stride(2), scale.stride(0), scale.stride(1),
        D=D, BLOCK_D=triton.next_power_of_2(D), BLOCK_T=BLOCK_T, QMAX_=QMAX[kv_dtype],
        IS_FP8=kv_dtype == "fp8_e4m3", num_warps=4 if BLOCK_T >= 16 else 1)


def reference(x: torch.Tensor, kv_dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch reference: ``(q [B, Hkv, T, D], scale [B, Hkv, T])`` for ``x [B, Hkv, T, D]``."""
    xf = x.float()
    scale = (xf.abs().amax(-1) / QMAX[kv_dtype]).clamp_min(1e-12)
    y = xf / scale[..., None]
    if kv_dtype == "fp8_e4m3":
        return y.to(torch.float8_e4m3fn), scale
    r = torch.sign(y) * torch.floor(y.abs() + 0.5)
    return r.clamp(-127, 127).to(torch.int8), scale
