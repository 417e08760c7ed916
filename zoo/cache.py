"""Static, preallocated KV cache (gpt-fast ``KVCache``): allocated once, written in place.

Layout: ``k`` and ``v`` are each a list of one tensor per layer, ``[batch, n_kv_heads, capacity,
head_dim]``, contiguous, in the cache dtype (an MLA design's, ``zoo.latent``: the latents ``[batch,
1, capacity, kv_lora_rank]`` in ``k``, the rotated keys ``[batch, 1, capacity, qk_rope_head_dim]``
in ``v``); a global layer's capacity is ``max_seq_len`` and the
token at position ``p`` of sequence ``b`` lives at ``[b, :, p, :]``. A local layer (a sliding
window of ``W < max_seq_len`` positions, ``zoo.layer_types``) keeps only its window, a ring
buffer of ``W`` slots: position ``p`` at slot ``p % W`` (its keys are stored rotated, so the
order of the slots does not matter to attention), KV bytes bounded by the window. Positions are
written with ``index_copy_`` from a device tensor, so the write is shape-static and can be
captured in a CUDA graph.

Quantized caches (``int8``, ``fp8_e4m3``) store the same layout in one byte per element plus a
float32 scale per (layer, batch, kv head, slot) in ``k_scale``/``v_scale`` (per layer,
``[batch, n_kv_heads, capacity]``): the scale is ``amax(|x|) / qmax`` over the head_dim
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
        cfg: the design (``n_layers``, ``n_kv_heads``, ``head_dim``, ``kv_dtype``, the layers'
            windows).
        batch: sequences held (max batch size).
        max_seq_len: positions held per sequence.
        device: where to allocate.

    Bytes held: ``2 * batch * n_kv_heads * head_dim * bytes(kv_dtype) * sum(capacity)`` over the
    layers (``capacity``: ``max_seq_len``, a local layer's ``min(window, max_seq_len)``) plus, for
    quantized caches, ``2 * batch * n_kv_heads * 4 * sum(capacity)`` of scales.
    """

    def __init__(self, cfg: ModelConfig, batch: int, max_seq_len: int,
                 device: torch.device | str = "cpu"):
        super().__init__()
        self.kv_dtype = cfg.kv_dtype
        self.quantized = cfg.kv_dtype in QMAX
        dt = TORCH_DTYPES[cfg.kv_dtype]
        self.capacity = [min(cfg.layer_window(i) or max_seq_len, max_seq_len)
                         for i in range(cfg.n_layers)]
        self.k, self.v, self.k_scale, self.v_scale = [], [], [], []
        for i, cap in enumerate(self.capacity):
            shape = (batch, cfg.n_kv_heads, cap, cfg.head_dim)
            vshape = shape
            if cfg.kv_lora_rank:  # MLA (zoo.latent): the latent in k, the rotated key in v
                shape, vshape = (batch, 1, cap, cfg.kv_lora_rank), (batch, 1, cap, cfg.head_dim)
            self._add(f"k{i}", self.k, torch.zeros(shape, dtype=dt, device=device))
            self._add(f"v{i}", self.v, torch.zeros(vshape, dtype=dt, device=device))
            if self.quantized:
                self._add(f"k_scale{i}", self.k_scale, torch.ones(shape[:-1], device=device))
                self._add(f"v_scale{i}", self.v_scale, torch.ones(shape[:-1], device=device))
        self.batch, self.max_seq_len = batch, max_seq_len

    def _add(self, name: str, to: list, t: torch.Tensor) -> None:
        self.register_buffer(name, t, persistent=False)
        to.append(t)

    def ring(self, layer: int) -> bool:
        """Whether ``layer`` keeps a ring of its window (fewer slots than ``max_seq_len``)."""
        return self.capacity[layer] < self.max_seq_len

    def slots(self, layer: int, input_pos: torch.Tensor, n: int) -> tuple[torch.Tensor, slice]:
        """``(slots [m], tokens)``: where the last ``m = min(n, capacity)`` of ``n`` tokens at
        ``input_pos [n]`` go in ``layer``'s buffers, and the slice of the tokens written (a ring
        keeps the last ``capacity`` of a longer prompt; one slot is never written twice)."""
        cap = self.capacity[layer]
        if cap >= self.max_seq_len:
            return input_pos, slice(None)
        keep = slice(max(n - cap, 0), None)
        return input_pos[keep] % cap, keep

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write new keys/values and return the layer's full cache views.

        Args:
            layer: layer index.
            input_pos: ``[T]`` int64 positions being written (same for all sequences).
            k, v: ``[batch, n_kv_heads, T, head_dim]`` in the model dtype.

        Returns:
            ``(k_cache, v_cache)`` views ``[batch, n_kv_heads, capacity, head_dim]`` in the model
            dtype (dequantized copies for a quantized cache; the Triton decode path reads the
            quantized buffers directly instead).
        """
        self.write(layer, input_pos, k, v)
        if not self.quantized:
            return self.k[layer], self.v[layer]
        return (dequantize(self.k[layer], self.k_scale[layer], k.dtype),
                dequantize(self.v[layer], self.v_scale[layer], v.dtype))

    def write(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write new keys/values ``[batch, n_kv_heads, T, head_dim]`` at ``input_pos`` (a local
        layer: at their ring slots, ``slots``), quantizing on write for int8/fp8 caches; returns
        nothing (the Triton decode path reads the buffers)."""
        input_pos, keep = self.slots(layer, input_pos, k.shape[2])
        k, v = k[:, :, keep], v[:, :, keep]
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
