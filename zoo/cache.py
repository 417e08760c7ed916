"""Static, preallocated KV cache (gpt-fast ``KVCache``): allocated once, written in place.

Layout: ``k`` and ``v`` are each ``[n_layers, batch, n_kv_heads, max_seq_len, head_dim]``, contiguous,
in the cache dtype. Layer ``i`` works on the views ``k[i]``, ``v[i]`` of shape
``[batch, n_kv_heads, max_seq_len, head_dim]``; the token at position ``p`` of sequence ``b`` lives at
``[:, b, :, p, :]``. Positions are written with ``index_copy_`` from a device tensor, so the write
is shape-static and can be captured in a CUDA graph.

Quantized caches (``int8``, ``fp8_e4m3``) store the same layout in one byte per element plus a
float32 scale per (layer, batch, kv head, position) in ``k_scale``/``v_scale``
``[n_layers, batch, n_kv_heads, max_seq_len]``: the scale is ``amax(|x|) / qmax`` over the head_dim
channels of that token and head (per-token, per-head symmetric quantization, as in KIVI's
per-token value quantization, arXiv:2402.02750, and TensorRT-LLM's int8/fp8 KV cache).
"""

from __future__ import annotations

import torch

from .config import ModelConfig

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                "int8": torch.int8, "fp8_e4m3": getattr(torch, "float8_e4m3fn", None)}
QMAX = {"int8": 127.0, "fp8_e4m3": 448.0}


class KVCache(torch.nn.Module):
    """Static K and V buffers for all layers of one model.

    Args:
        cfg: the design (``n_layers``, ``n_kv_heads``, ``head_dim``, ``kv_dtype``).
        batch: sequences held (max batch size).
        max_seq_len: positions held per sequence.
        device: where to allocate.

    Bytes held: ``2 * n_layers * batch * n_kv_heads * max_seq_len * head_dim * bytes(kv_dtype)``
    plus, for quantized caches, ``2 * n_layers * batch * n_kv_heads * max_seq_len * 4`` of scales.
    """

    def __init__(self, cfg: ModelConfig, batch: int, max_seq_len: int,
                 device: torch.device | str = "cpu"):
        super().__init__()
        self.kv_dtype = cfg.kv_dtype
        self.quantized = cfg.kv_dtype in QMAX
        dt = TORCH_DTYPES[cfg.kv_dtype]
        shape = (cfg.n_layers, batch, cfg.n_kv_heads, max_seq_len, cfg.head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dt, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dt, device=device), persistent=False)
        if self.quantized:
            sshape = shape[:-1]
            self.register_buffer("k_scale", torch.ones(sshape, device=device), persistent=False)
            self.register_buffer("v_scale", torch.ones(sshape, device=device), persistent=False)
        self.batch, self.max_seq_len = batch, max_seq_len

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write new keys/values and return the layer's full cache views.

        Args:
            layer: layer index.
            input_pos: ``[T]`` int64 positions being written (same for all sequences).
            k, v: ``[batch, n_kv_heads, T, head_dim]`` in the model dtype.

        Returns:
            ``(k_cache, v_cache)`` views ``[batch, n_kv_heads, max_seq_len, head_dim]`` in the model
            dtype (dequantized copies for a quantized cache; the Triton decode path reads the
            quantized buffers directly instead).
        """
        self.write(layer, input_pos, k, v)
        if not self.quantized:
            return self.k[layer], self.v[layer]
        return (dequantize(self.k[layer], self.k_scale[layer], k.dtype),
                dequantize(self.v[layer], self.v_scale[layer], v.dtype))

    def write(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write new keys/values ``[batch, n_kv_heads, T, head_dim]`` at ``input_pos``, quantizing
        on write for int8/fp8 caches; returns nothing (the Triton decode path reads the buffers)."""
        if not self.quantized:
            self.k[layer].index_copy_(2, input_pos, k)
            self.v[layer].index_copy_(2, input_pos, v)
            return
        from kernels.kv_quant import quantize_kv

        quantize_kv(k, self.k[layer], self.k_scale[layer], input_pos, self.kv_dtype)
        quantize_kv(v, self.v[layer], self.v_scale[layer], input_pos, self.kv_dtype)

    def nbytes(self) -> int:
        """Bytes held by the cache buffers (scales included)."""
        return sum(b.numel() * b.element_size() for b in self.buffers())


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``q * scale`` in ``dtype``. q: ``[..., S, D]`` int8/fp8; scale: ``[..., S]`` float32."""
    return (q.to(torch.float32) * scale.unsqueeze(-1)).to(dtype)
