"""The decode step's linear layer: the Triton GEMV (``kernels.gemv``) or cuBLAS, per shape.

``linear`` runs a layer with its prologue (RMSNorm + residual add, or SwiGLU) for ``M <= 16``
rows on whichever of the two measured faster for that shape on this device (``choose``: both
timed inside a CUDA graph, as the decode step replays them, the first time the shape is met
outside a capture; launched from Python a microsecond kernel times the host), the choice kept
per device by ``kernels.tuning``. Both are timed cold (``kernels.graph_timing.time_ms`` with
``cold=True``: the weight read from DRAM, as the step meets every layer's): timed warm, a
weight that fits the L2 chose cuBLAS for the 1B's SwiGLU down-projection at 8 rows on the H100
(11.8 us against the GEMV's 12.5), which cold takes 19.9 us against 16.9
(``results/reference/decode_levers_h100.md``). ``cublas_linear`` is the cuBLAS side:
the prologue as its own Triton kernel, then ``F.linear``. ``choices`` lists what was chosen, for
the results row.
"""

from __future__ import annotations

import torch

from . import tuning
from .gemv import _interpreted, gemv
from .graph_timing import time_ms
from .rmsnorm import rmsnorm
from .swiglu import swiglu

_CHOICE: dict[tuple, str] = {}


def choose(key: tuple, triton_fn, cublas_fn, device: torch.device | None = None) -> str:
    """``'triton'`` or ``'cublas'`` for a shape key: the choice kept for this device
    (``kernels.tuning``, under the key and ``"cold"``), else both timed once cold in a CUDA graph
    (``kernels.graph_timing.time_ms``, ``cold=True``) on the first call outside a capture, then
    kept. During a capture (or off the GPU) an unknown key takes ``'triton'``."""
    if key in _CHOICE:
        return _CHOICE[key]
    if not torch.cuda.is_available():
        return "triton"
    dev = tuning.device_name(device or torch.device("cuda"))
    full = key + ("cold",)
    if (kept := tuning.lookup("decode_linear", full, dev)) in ("triton", "cublas"):
        _CHOICE[key] = kept
        return kept
    if torch.cuda.is_current_stream_capturing():
        return "triton"
    t_tr, t_cb = time_ms(triton_fn, cold=True), time_ms(cublas_fn, cold=True)
    _CHOICE[key] = "triton" if t_tr <= t_cb else "cublas"
    tuning.record("decode_linear", full, _CHOICE[key], dev)
    return _CHOICE[key]


def choices() -> dict[str, str]:
    """The per-shape choices made so far: ``"M=1 N=4096 K=14336 swiglu bfloat16" -> "triton"``
    (rows, the weight's ``[N, K]``, the prologue, the dtype; one device's)."""
    return {f"M={k[0]} N={k[1]} K={k[2]} {k[3]} {k[4]}": v for k, v in sorted(_CHOICE.items())}


def chosen(M: int, weight: torch.Tensor, prologue: str) -> str | None:
    """What ``choose`` picked for ``M`` rows of ``weight`` (``[N, K]``, its dtype and device)
    with ``prologue`` (``none``, ``norm`` with or without the residual add, ``swiglu``), or
    None."""
    N, K = weight.shape
    dt, dev = str(weight.dtype).removeprefix("torch."), str(weight.device)
    return next((v for k, v in _CHOICE.items() if k[:3] == (M, N, K) and k[4:] == (dt, dev)
                 and k[3].split("+")[0] == prologue), None)


def cublas_linear(x, weight, bias=None, prologue="none", norm_weight=None, eps=1e-5,
                  residual=None):
    """What ``gemv`` computes, on cuBLAS: the prologue as its own Triton kernel
    (``kernels.rmsnorm`` / ``kernels.swiglu``), then ``F.linear``: ``x [..., K]`` (``[..., 2K]``
    for ``swiglu``), ``weight [N, K]`` -> ``y [..., N]``; with ``norm`` and ``residual``,
    ``(y, x + residual)``, as ``gemv`` returns."""
    if prologue == "swiglu":
        return torch.nn.functional.linear(swiglu(x), weight, bias)
    if prologue == "norm":
        out = rmsnorm(x, norm_weight, eps, residual=residual)
        a, h = out if residual is not None else (out, None)
        y = torch.nn.functional.linear(a, weight, bias)
        return (y, h) if h is not None else y
    return torch.nn.functional.linear(x, weight, bias)


def linear(x: torch.Tensor, layer: torch.nn.Linear, prologue: str = "none",
           norm: torch.nn.Module | None = None, residual: torch.Tensor | None = None,
           pdl_trigger: bool = True):
    """A decode linear layer with its prologue, on the faster of ``kernels.gemv`` and cuBLAS.

    The two round the norm at different points (see ``kernels.gemv``'s module doc): outputs agree to the
    activation dtype's rounding, not bit for bit, and which one runs is recorded by ``choices``.

    ``layer`` is the ``nn.Linear`` (weight ``[N, K]``); ``norm`` the RMSNorm module whose
    ``weight``/``eps`` the ``norm`` prologue uses. Returns what ``gemv`` returns, except that the
    ``norm`` prologue always returns ``(y, h)``: ``h = x + residual``, or ``x`` without a residual
    (the residual stream either way). On cuBLAS the prologue runs as its own Triton kernel
    (``kernels.rmsnorm`` / ``kernels.swiglu``) first. ``pdl_trigger``: ``kernels.gemv.gemv``'s.
    """
    w, b = layer.weight, layer.bias
    nw, eps = (norm.weight, norm.eps) if norm is not None else (None, 1e-5)

    def fused():
        return gemv(x, w, b, prologue, nw, eps, residual, pdl_trigger=pdl_trigger)

    def cublas():
        return cublas_linear(x, w, b, prologue, nw, eps, residual)

    if prologue == "norm" and residual is None:
        return _dispatch(x, w, b, prologue, fused, cublas), x
    return _dispatch(x, w, b, prologue + ("+res" if residual is not None else ""), fused, cublas)


def _dispatch(x, w, b, what: str, fused, cublas):
    if _interpreted(x):
        return fused()
    M = x.numel() // x.shape[-1]
    key = (M, w.shape[0], w.shape[1], what + ("+bias" if b is not None else ""),
           str(w.dtype).removeprefix("torch."), str(x.device))
    return fused() if choose(key, fused, cublas, x.device) == "triton" else cublas()
