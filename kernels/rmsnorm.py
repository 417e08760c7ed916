"""RMSNorm fused with the residual add: ``h = x + residual; y = rmsnorm(h) * weight``.

One program normalizes one row of ``d_model`` channels in float32 (HF Llama's numerics: normalize
in float32, cast to the input dtype, then scale). Minimum DRAM traffic per row: read x (and the
residual), write y (and h): ``(2 or 4) * d_model * bytes`` plus the weight once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_cols, eps,
                    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # arithmetic in float32, rounding to the storage dtype where the reference rounds
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    dt = x.dtype
    xf = x.to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(r_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        h = (xf + r).to(dt)
        tl.store(h_ptr + row * n_cols + cols, h, mask=mask)
        xf = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (xf * rstd).to(dt).to(tl.float32) * w
    tl.store(y_ptr + row * n_cols + cols, y.to(dt), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float,
            residual: torch.Tensor | None = None):
    """Fused (residual add +) RMSNorm over the last dimension.

    Args:
        x: ``[..., d]``. residual: same shape or None (non-dense rows are copied first).
        weight: ``[d]``, same dtype.

    Returns:
        ``y`` if ``residual`` is None, else ``(y, h)`` with ``h = x + residual`` (the new residual
        stream) and ``y = rmsnorm(h) * weight``; all ``[..., d]`` in ``x.dtype``.
    """
    d = x.shape[-1]
    x2 = x.reshape(-1, d).contiguous()  # rows must be dense: the kernel strides by d
    y = torch.empty_like(x2)
    h = torch.empty_like(x2) if residual is not None else y
    r = residual.reshape(-1, d).contiguous() if residual is not None else x2
    _rmsnorm_kernel[(x2.shape[0],)](x2, r, weight, y, h, d, eps,
                                    HAS_RESIDUAL=residual is not None,
                                    BLOCK=triton.next_power_of_2(d),
                                    num_warps=8 if d >= 4096 else 4)
    y = y.view(x.shape)
    return y if residual is None else (y, h.view(x.shape))


def reference(x, weight, eps, residual=None):
    """PyTorch reference (the zoo's ``RMSNorm`` numerics)."""
    h = x + residual if residual is not None else x
    hf = h.float()
    y = weight * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)
    return y if residual is None else (y, h)
