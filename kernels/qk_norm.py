"""QK-norm in one launch: the queries' and keys' RMSNorm read from the qkv projection's rows.

A design with QK-norm (OLMoE's over the whole projection, ``qk_norm=full``; Qwen3's and Gemma 3's
per head, ``qk_norm=head``) normalises q and k before RoPE. On the Triton path that took a
RMSNorm launch each, and for several rows (a prefill, a decode step of a batch) three more: q and k
copied to dense rows first (the qkv output holds q, k and v side by side, so their rows are
strided) and v made dense for the decode kernel. Here one launch does all of it: program ``(r,
j)`` takes row ``r`` of ``qkv [R, q_dim + 2 kv_dim]`` and group ``j``: q's groups (one per row for
``full``, one per head for ``head``), then k's, normalised in float32 (HF's numerics: normalise,
round to the input dtype, then scale; Gemma's ``1 + w`` scaled in float32 and rounded once, as
``zoo.norms.RMSNorm1p``) into dense ``q [R, q_dim]`` and ``k [R, kv_dim]``, then v's groups copied
into a dense ``v [R, kv_dim]`` (for one row v is a dense slice already: not copied). Minimum DRAM
traffic: q and k read and written, v read and written for several rows, the two weights.

Reference: ``reference`` (the zoo's ``RMSNorm`` / ``RMSNorm1p`` on the split projection).
Measured on an H200 (``results/reference/moe_h100.md``, 2026-11-28): the two launches took
3.1-4.0 us of a batch-1 MoE layer's step; in one launch the decode step of OLMoE-1B-7B was 2.6%
shorter at batch 1 and 5.3% at batch 8 (five launches became one), Qwen3-30B-A3B's 2.9% at 1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _norm_group(src, w_ptr, dst, width, eps, ONE_P: tl.constexpr, BLOCK: tl.constexpr):
    # one group of ``width`` channels: RMSNorm in float32 (rounded where the reference rounds)
    cols = tl.arange(0, BLOCK)
    m = cols < width
    x = tl.load(src + cols, mask=m, other=0.0)
    dt = x.dtype
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / width + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    if ONE_P:  # Gemma: (1 + w) in float32, one rounding
        y = xf * rstd * (1.0 + w)
    else:  # HF Llama / Qwen3 / OLMoE: round the normalised x, then scale
        y = (xf * rstd).to(dt).to(tl.float32) * w
    tl.store(dst + cols, y.to(dt), mask=m)


@triton.jit
def _qk_norm_kernel(x_ptr, wq_ptr, wk_ptr, q_ptr, k_ptr, v_ptr, stride, q_dim, kv_dim, GQ, GK,
                    NQ, NK, eps, ONE_P: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    row = x_ptr + r * stride
    if j < NQ:  # a group of q
        _norm_group(row + j * GQ, wq_ptr, q_ptr + r * q_dim + j * GQ, GQ, eps, ONE_P, BLOCK)
    elif j < NQ + NK:  # a group of k
        g = j - NQ
        _norm_group(row + q_dim + g * GK, wk_ptr, k_ptr + r * kv_dim + g * GK, GK, eps, ONE_P,
                    BLOCK)
    else:  # a group of v, copied to dense rows
        g = j - NQ - NK
        cols = tl.arange(0, BLOCK)
        m = cols < GK
        v = tl.load(row + q_dim + kv_dim + g * GK + cols, mask=m)
        tl.store(v_ptr + r * kv_dim + g * GK + cols, v, mask=m)


def qk_norm(qkv: torch.Tensor, q_dim: int, kv_dim: int, wq: torch.Tensor, wk: torch.Tensor,
            eps: float, head_dim: int = 0, one_p: bool = False, copy_v: bool = False
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q and k RMSNorm-ed and v, as dense tensors, from the qkv projection's output in one launch.

    Args:
        qkv: ``[..., q_dim + 2 kv_dim]`` (q, k, v side by side; the last dimension dense).
        q_dim, kv_dim: the widths of q and of k (and v). wq: ``[q_dim]`` or ``[head_dim]``; wk:
            ``[kv_dim]`` or ``[head_dim]``. eps: the norm's epsilon. head_dim: 0 for a norm over
            each projection (``qk_norm=full``), else the head width (``qk_norm=head``). one_p:
            Gemma's ``1 + w`` scale. copy_v: v copied for one row too (a custom op's outputs
            may not alias its input: ``kernels.ops``).

    Returns:
        ``(q [..., q_dim], k [..., kv_dim], v [..., kv_dim])`` in ``qkv``'s dtype, dense (``v``
        the slice itself for one row).

    Raises:
        ValueError: a width that is not a whole number of heads, or a last dimension that is not
        ``q_dim + 2 kv_dim``.
    """
    n = qkv.shape[-1]
    if n != q_dim + 2 * kv_dim or (head_dim and (q_dim % head_dim or kv_dim % head_dim)):
        raise ValueError(f"qk_norm: qkv's last dimension {n} must be q_dim + 2 kv_dim = "
                         f"{q_dim} + 2 x {kv_dim}, in heads of {head_dim}")
    lead = qkv.shape[:-1]
    x = qkv.reshape(-1, n)
    if x.stride(-1) != 1:
        x = x.contiguous()
    R = x.shape[0]
    GQ, GK = (head_dim, head_dim) if head_dim else (q_dim, kv_dim)
    NQ, NK = q_dim // GQ, kv_dim // GK
    q = torch.empty(R, q_dim, device=x.device, dtype=x.dtype)
    k = torch.empty(R, kv_dim, device=x.device, dtype=x.dtype)
    copy_v = copy_v or R > 1
    v = torch.empty(R, kv_dim, device=x.device, dtype=x.dtype) if copy_v else None
    block = triton.next_power_of_2(max(GQ, GK))
    _qk_norm_kernel[(R, NQ + NK + (NK if copy_v else 0))](
        x, wq, wk, q, k, v if copy_v else q, x.stride(0), q_dim, kv_dim, GQ, GK, NQ, NK, eps,
        ONE_P=one_p, BLOCK=block, num_warps=max(1, min(8, block // 256)))
    if not copy_v:
        v = x[:, q_dim + kv_dim:]
    return q.view(*lead, q_dim), k.view(*lead, kv_dim), v.reshape(*lead, kv_dim)


def reference(qkv: torch.Tensor, q_dim: int, kv_dim: int, wq: torch.Tensor, wk: torch.Tensor,
              eps: float, head_dim: int = 0, one_p: bool = False):
    """PyTorch reference: the split projection, q and k normalised as ``zoo.norms`` does (per
    head when ``head_dim``), v as it is."""
    q, k, v = qkv.split([q_dim, kv_dim, kv_dim], dim=-1)

    def norm(t, w):
        if head_dim:
            t = t.unflatten(-1, (-1, head_dim))
        tf = t.float()
        tf = tf * torch.rsqrt(tf.pow(2).mean(-1, keepdim=True) + eps)
        y = (tf * (1.0 + w.float())).to(t.dtype) if one_p else w * tf.to(t.dtype)
        return y.flatten(-2) if head_dim else y

    return norm(q, wq), norm(k, wk), v
