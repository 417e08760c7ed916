"""The fused kernels as PyTorch custom ops, so ``torch.compile`` traces a step that launches them.

Dynamo cannot trace the kernels' Python dispatch (tile choices kept in files, Triton's autotuners,
device queries, the GEMV-or-cuBLAS choice): tracing the Triton decode step failed with
``Unsupported: torch.* op returned non-Tensor``. Each function here has the signature of the
kernel module's own (``kernels.rmsnorm.rmsnorm``, ``kernels.swiglu.swiglu``,
``kernels.qk_norm.qk_norm``, ``kernels.rope.rope_kv_write_``,
``kernels.decode_attention.decode_attention``,
``kernels.prefill_attention.prefill_attention``, ``kernels.mla_decode.mla_decode``,
``kernels.mla_rope.mla_rope_write_``, ``kernels.head_gemv.head_gemv``,
``kernels.decode_linear.linear``) and calls it directly when run eagerly; while Dynamo traces
(``torch.compiler.is_compiling()``) it calls the op ``torch.ops.designzoo.<name>``, registered with
``torch.library.custom_op`` (PyTorch's recommended route for a kernel with Python around it,
torch >= 2.4). Dynamo and Inductor keep each op as one node, shaped by its fake implementation,
and order it by the tensors it declares it writes (``mutates_args``: the KV cache and its scales,
q rotated in place). Inductor's CUDA graph then replays the same launches as ``mode=cudagraph``
(with PDL, the folded merge and RoPE, the decode GEMV path).

Eager calls do not go through the dispatcher: a Python custom op costs the host microseconds a
call, which an eager decode step would measure as the design's.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import Tensor

from . import decode_attention as _attention
from . import decode_linear as _linear
from . import head_gemv as _head_gemv
from . import mla_decode as _mla
from . import mla_rope as _mla_rope
from . import prefill_attention as _prefill
from . import qk_norm as _qk_norm
from . import rmsnorm as _rmsnorm
from . import rope as _rope
from . import swiglu as _swiglu


def _compiling() -> bool:
    return torch.compiler.is_compiling()


@torch.library.custom_op("designzoo::rmsnorm", mutates_args=())
def _rmsnorm_op(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return _rmsnorm.rmsnorm(x, weight, eps)


@_rmsnorm_op.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op("designzoo::rmsnorm_residual", mutates_args=())
def _rmsnorm_residual_op(x: Tensor, weight: Tensor, eps: float,
                         residual: Tensor) -> tuple[Tensor, Tensor]:
    y, h = _rmsnorm.rmsnorm(x, weight, eps, residual=residual)
    return y, h


@_rmsnorm_residual_op.register_fake
def _(x, weight, eps, residual):
    return torch.empty_like(x), torch.empty_like(x)


def rmsnorm(x: Tensor, weight: Tensor, eps: float, residual: Tensor | None = None):
    """``kernels.rmsnorm.rmsnorm`` (``x [..., d]`` -> ``y``, or ``(y, h)`` with a residual), as an
    op under ``torch.compile``."""
    if not _compiling():
        return _rmsnorm.rmsnorm(x, weight, eps, residual=residual)
    if residual is None:
        return _rmsnorm_op(x, weight, eps)
    return _rmsnorm_residual_op(x, weight, eps, residual)


@torch.library.custom_op("designzoo::qk_norm", mutates_args=())
def _qk_norm_op(qkv: Tensor, q_dim: int, kv_dim: int, wq: Tensor, wk: Tensor, eps: float,
                head_dim: int, one_p: bool) -> tuple[Tensor, Tensor, Tensor]:
    # an op's outputs may not alias its inputs: v copied by the kernel for one row too
    return _qk_norm.qk_norm(qkv, q_dim, kv_dim, wq, wk, eps, head_dim, one_p, copy_v=True)


@_qk_norm_op.register_fake
def _(qkv, q_dim, kv_dim, wq, wk, eps, head_dim, one_p):
    lead = qkv.shape[:-1]
    return (qkv.new_empty(*lead, q_dim), qkv.new_empty(*lead, kv_dim),
            qkv.new_empty(*lead, kv_dim))


def qk_norm(qkv: Tensor, q_dim: int, kv_dim: int, wq: Tensor, wk: Tensor, eps: float,
            head_dim: int = 0, one_p: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """``kernels.qk_norm.qk_norm`` (``qkv [..., q_dim + 2 kv_dim]`` -> dense ``q``, ``k``,
    ``v``), as an op under ``torch.compile`` (a custom op may not return a view of its input:
    there the same launch copies v for one row too)."""
    if not _compiling():
        return _qk_norm.qk_norm(qkv, q_dim, kv_dim, wq, wk, eps, head_dim, one_p)
    return _qk_norm_op(qkv, q_dim, kv_dim, wq, wk, eps, head_dim, one_p)


@torch.library.custom_op("designzoo::swiglu", mutates_args=())
def _swiglu_op(h: Tensor) -> Tensor:
    return _swiglu.swiglu(h)


@_swiglu_op.register_fake
def _(h):
    return h.new_empty(*h.shape[:-1], h.shape[-1] // 2)


def swiglu(h: Tensor) -> Tensor:
    """``kernels.swiglu.swiglu`` (``h [..., 2F]`` -> ``[..., F]``), as an op under
    ``torch.compile``."""
    return _swiglu_op(h) if _compiling() else _swiglu.swiglu(h)


@torch.library.custom_op("designzoo::rope_kv_write",
                         mutates_args=("q", "k", "k_cache", "v_cache", "k_scale", "v_scale"))
def _rope_kv_write_op(q: Tensor, k: Tensor, v: Tensor, cos: Tensor, sin: Tensor,
                      input_pos: Tensor, k_cache: Tensor, v_cache: Tensor,
                      k_scale: Tensor | None, v_scale: Tensor | None, kv_dtype: str | None,
                      k_inplace: bool, pdl: bool) -> None:
    _rope.rope_kv_write_(q, k, v, cos, sin, input_pos, k_cache, v_cache, k_scale, v_scale,
                         kv_dtype, k_inplace, pdl)


@_rope_kv_write_op.register_fake
def _(q, k, v, cos, sin, input_pos, k_cache, v_cache, k_scale, v_scale, kv_dtype, k_inplace,
      pdl):
    return None


def rope_kv_write_(q: Tensor, k: Tensor, v: Tensor, cos: Tensor, sin: Tensor, input_pos: Tensor,
                   k_cache: Tensor, v_cache: Tensor, k_scale: Tensor | None = None,
                   v_scale: Tensor | None = None, kv_dtype: str | None = None,
                   k_inplace: bool = False, pdl: bool = False) -> Tensor:
    """``kernels.rope.rope_kv_write_`` (q rotated in place, k and v into the cache; returns
    ``q``), as an op under ``torch.compile``."""
    if not _compiling():
        return _rope.rope_kv_write_(q, k, v, cos, sin, input_pos, k_cache, v_cache, k_scale,
                                    v_scale, kv_dtype, k_inplace, pdl)
    _rope_kv_write_op(q, k, v, cos, sin, input_pos, k_cache, v_cache, k_scale, v_scale, kv_dtype,
                      k_inplace, pdl)
    return q


@torch.library.custom_op("designzoo::decode_attention",
                         mutates_args=("k_cache", "v_cache", "k_scale", "v_scale"))
def _decode_attention_op(q: Tensor, k_cache: Tensor, v_cache: Tensor, pos: Tensor,
                         k_scale: Tensor | None, v_scale: Tensor | None, sm_scale: float | None,
                         fold_merge: bool | None, pdl: bool, new_k: Tensor | None,
                         new_v: Tensor | None, cos: Tensor | None, sin: Tensor | None,
                         sinks: Tensor | None) -> Tensor:
    new_kv = (new_k, new_v, cos, sin) if new_k is not None else None
    return _attention.decode_attention(q, k_cache, v_cache, pos, k_scale, v_scale, sm_scale,
                                       fold_merge, pdl, new_kv, sinks)


@_decode_attention_op.register_fake
def _(q, k_cache, v_cache, pos, k_scale, v_scale, sm_scale, fold_merge, pdl, new_k, new_v, cos,
      sin, sinks):
    return torch.empty_like(q)


def decode_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, pos: Tensor,
                     k_scale: Tensor | None = None, v_scale: Tensor | None = None,
                     sm_scale: float | None = None, fold_merge: bool | None = None,
                     pdl: bool = False, new_kv: tuple | None = None,
                     sinks: Tensor | None = None) -> Tensor:
    """``kernels.decode_attention.decode_attention`` (``q [B, H, D]`` or ``[B, H, 1, D]`` over the
    cache ``[B, Hkv, S, D]`` -> q's shape; with ``new_kv`` it writes the token's k and v into the
    cache; ``sinks [H]``), as an op under ``torch.compile``."""
    if not _compiling():
        return _attention.decode_attention(q, k_cache, v_cache, pos, k_scale, v_scale, sm_scale,
                                           fold_merge, pdl, new_kv, sinks)
    nk, nv, cos, sin = new_kv if new_kv is not None else (None, None, None, None)
    return _decode_attention_op(q, k_cache, v_cache, pos, k_scale, v_scale, sm_scale, fold_merge,
                                pdl, nk, nv, cos, sin, sinks)


def _layers(weight, bias, norm_weight, eps):
    # what ``decode_linear.linear`` reads of its nn.Linear and RMSNorm modules
    return (SimpleNamespace(weight=weight, bias=bias),
            SimpleNamespace(weight=norm_weight, eps=eps) if norm_weight is not None else None)


@torch.library.custom_op("designzoo::decode_linear", mutates_args=())
def _linear_op(x: Tensor, weight: Tensor, bias: Tensor | None, prologue: str,
               norm_weight: Tensor | None, eps: float, pdl_trigger: bool) -> Tensor:
    layer, norm = _layers(weight, bias, norm_weight, eps)
    out = _linear.linear(x, layer, prologue, norm, pdl_trigger=pdl_trigger)
    return out[0] if prologue == "norm" else out


@_linear_op.register_fake
def _(x, weight, bias, prologue, norm_weight, eps, pdl_trigger):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@torch.library.custom_op("designzoo::decode_linear_residual", mutates_args=())
def _linear_residual_op(x: Tensor, weight: Tensor, bias: Tensor | None, norm_weight: Tensor,
                        eps: float, residual: Tensor, pdl_trigger: bool) -> tuple[Tensor, Tensor]:
    layer, norm = _layers(weight, bias, norm_weight, eps)
    y, h = _linear.linear(x, layer, "norm", norm, residual, pdl_trigger=pdl_trigger)
    return y, h


@_linear_residual_op.register_fake
def _(x, weight, bias, norm_weight, eps, residual, pdl_trigger):
    return x.new_empty(*x.shape[:-1], weight.shape[0]), torch.empty_like(x)


def linear(x: Tensor, layer: torch.nn.Linear, prologue: str = "none",
           norm: torch.nn.Module | None = None, residual: Tensor | None = None,
           pdl_trigger: bool = True):
    """``kernels.decode_linear.linear`` (a decode step's linear layer with its prologue, on the
    faster of the Triton GEMV and cuBLAS; ``norm`` returns ``(y, h)``), as an op under
    ``torch.compile``."""
    if not _compiling():
        return _linear.linear(x, layer, prologue, norm, residual, pdl_trigger=pdl_trigger)
    w, b = layer.weight, layer.bias
    nw, eps = (norm.weight, norm.eps) if norm is not None else (None, 1e-5)
    if prologue == "norm" and residual is not None:
        return _linear_residual_op(x, w, b, nw, eps, residual, pdl_trigger)
    y = _linear_op(x, w, b, prologue, nw, eps, pdl_trigger)
    return (y, x) if prologue == "norm" else y


@torch.library.custom_op("designzoo::prefill_attention", mutates_args=())
def _prefill_attention_op(q: Tensor, k: Tensor, v: Tensor, window: int | None,
                          sinks: Tensor | None, scale: float | None) -> Tensor:
    return _prefill.prefill_attention(q, k, v, window, sinks, scale)


@_prefill_attention_op.register_fake
def _(q, k, v, window, sinks, scale):
    B, H, T, D = q.shape
    return q.new_empty(B, T, H, D).transpose(1, 2)


def prefill_attention(q: Tensor, k: Tensor, v: Tensor, window: int | None = None,
                      sinks: Tensor | None = None, scale: float | None = None) -> Tensor:
    """``kernels.prefill_attention.prefill_attention`` (a local or sink layer's causal prefill,
    ``q [B, H, T, D]``, ``k, v [B, Hkv, T, D]`` -> ``[B, H, T, D]``), as an op under
    ``torch.compile``."""
    if not _compiling():
        return _prefill.prefill_attention(q, k, v, window, sinks, scale)
    return _prefill_attention_op(q, k, v, window, sinks, scale)


@torch.library.custom_op("designzoo::head_gemv", mutates_args=())
def _head_gemv_op(x: Tensor, w: Tensor, transposed: bool, pdl: bool) -> Tensor:
    return _head_gemv.head_gemv(x, w, transposed=transposed, pdl=pdl)


@_head_gemv_op.register_fake
def _(x, w, transposed, pdl):
    return x.new_empty(*x.shape[:2], w.shape[1] if transposed else w.shape[2])


def head_gemv(x: Tensor, w: Tensor, transposed: bool = False, pdl: bool = False) -> Tensor:
    """``kernels.head_gemv.head_gemv`` (each head's rows times its own weight: ``x [B, H, K]``,
    ``w [H, K, N]`` or transposed ``[H, N, K]`` -> ``[B, H, N]``; ``pdl``: its programmatic
    dependent launch), as an op under ``torch.compile``."""
    if not _compiling():
        return _head_gemv.head_gemv(x, w, transposed=transposed, pdl=pdl)
    return _head_gemv_op(x, w, transposed, pdl)


@torch.library.custom_op("designzoo::mla_decode", mutates_args=())
def _mla_decode_op(q_lat: Tensor, q_pe: Tensor, latent: Tensor, k_pe: Tensor, pos: Tensor,
                   scale: float, out_dtype: torch.dtype, pdl: bool) -> Tensor:
    return _mla.mla_decode(q_lat, q_pe, latent, k_pe, pos, scale, out_dtype=out_dtype, pdl=pdl)


@_mla_decode_op.register_fake
def _(q_lat, q_pe, latent, k_pe, pos, scale, out_dtype, pdl):
    return q_lat.new_empty(q_lat.shape, dtype=out_dtype)


def mla_decode(q_lat: Tensor, q_pe: Tensor, latent: Tensor, k_pe: Tensor, pos: Tensor,
               scale: float, out_dtype: torch.dtype = torch.float32, pdl: bool = False) -> Tensor:
    """``kernels.mla_decode.mla_decode`` (absorbed queries ``q_lat [B, H, r]``, rotated ``q_pe
    [B, H, R]`` over the cached latents ``[B, (1,) S, r]`` and keys ``[B, (1,) S, R]`` ->
    ``[B, H, r]`` in ``out_dtype``; ``pdl``: its programmatic dependent launch), as an op under
    ``torch.compile``."""
    if not _compiling():
        return _mla.mla_decode(q_lat, q_pe, latent, k_pe, pos, scale, out_dtype=out_dtype,
                               pdl=pdl)
    return _mla_decode_op(q_lat, q_pe, latent, k_pe, pos, scale, out_dtype, pdl)


@torch.library.custom_op("designzoo::mla_rope_write", mutates_args=("q", "lat_cache", "kpe_cache"))
def _mla_rope_write_op(q: Tensor, kv: Tensor, norm_weight: Tensor, eps: float, cos: Tensor,
                       sin: Tensor, input_pos: Tensor, lat_cache: Tensor, kpe_cache: Tensor,
                       nope: int, pdl: bool) -> None:
    _mla_rope.mla_rope_write_(q, kv, norm_weight, eps, cos, sin, input_pos, lat_cache, kpe_cache,
                              nope, pdl)


@_mla_rope_write_op.register_fake
def _(q, kv, norm_weight, eps, cos, sin, input_pos, lat_cache, kpe_cache, nope, pdl):
    return None


def mla_rope_write_(q: Tensor, kv: Tensor, norm_weight: Tensor, eps: float, cos: Tensor,
                    sin: Tensor, input_pos: Tensor, lat_cache: Tensor, kpe_cache: Tensor,
                    nope: int, pdl: bool = False) -> Tensor:
    """``kernels.mla_rope.mla_rope_write_`` (``q [B, T, H, nope + R]`` rotated in place, the
    latents of ``kv [B, T, r + R]`` normed and its RoPE keys rotated into the caches; returns
    ``q``; ``pdl``: its programmatic dependent launch), as an op under ``torch.compile``."""
    if not _compiling():
        return _mla_rope.mla_rope_write_(q, kv, norm_weight, eps, cos, sin, input_pos, lat_cache,
                                         kpe_cache, nope, pdl)
    _mla_rope_write_op(q, kv, norm_weight, eps, cos, sin, input_pos, lat_cache, kpe_cache, nope,
                       pdl)
    return q
