"""Number formats of a design: activation dtypes, KV-cache formats, bytes per element, and the
weight formats (bits per weight, scales included) a design may be priced at.

Sources: llama.cpp ``ggml-common.h`` block layouts (``block_q8_0``: 32 int8 + fp16 scale = 8.5
bits; ``block_q4_0``: 32 int4 + fp16 scale = 4.5 bits) and its reported k-quant averages
(``llama-quantize`` output for Llama-7B: Q4_K_M 4.85, Q5_K_M 5.69, Q6_K 6.56 bits per weight);
AWQ / GPTQ group-128 int4 with fp16 scale and zero (4.25); MLX 4-bit group 64 with fp16 scale and
bias (4.5).
"""

from __future__ import annotations

DTYPES = ("bf16", "fp16", "fp32")
KV_DTYPES = ("bf16", "fp16", "fp32", "int8", "fp8_e4m3")
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "fp8_e4m3": 1}
# Weight formats: bits per weight, scales included (a group of G weights sharing one fp16 scale
# adds 16 / G bits; llama.cpp's k-quants mix block types: their published averages). Only
# ``auto`` (the model dtype) runs on the zoo's kernels; the others are predicted only (the zoo
# keeps 16-bit weights on the GPU), so a published figure of a quantized model can be compared.
WEIGHT_FORMATS = {
    "auto": None, "fp32": 32.0, "bf16": 16.0, "fp16": 16.0,
    "fp8": 8.0,          # e4m3 per-tensor (vLLM, TensorRT-LLM)
    "int8": 8.0,         # per-channel scales (negligible per weight)
    "q8_0": 8.5,         # llama.cpp: 32 int8 + one fp16 scale
    "int4_g128": 4.25,   # AWQ / GPTQ: 128 int4 + fp16 scale and zero
    "q4_0": 4.5,         # llama.cpp: 32 int4 + one fp16 scale
    "q4_1": 5.0,         # llama.cpp: 32 int4 + fp16 scale and fp16 minimum
    "w4a16": 4.0,        # Qualcomm AI Hub int4 weights (its per-block scales not published)
    "mlx4": 4.5,         # MLX 4-bit, group 64: fp16 scale and bias
    "q4_k_m": 4.85,      # llama.cpp Q4_K_M (its reported average for Llama-7B-class models)
    "q5_k_m": 5.69,      # llama.cpp Q5_K_M
    "q6_k": 6.56,        # llama.cpp Q6_K
}


def weight_format_of_hf(qc: dict | None) -> str:
    """The weight format (``WEIGHT_FORMATS``) of a ``config.json``'s ``quantization_config``:
    none -> ``auto``; ``quant_method: fp8`` (e4m3, per tensor or in 128 x 128 blocks: one float32
    scale per 16384 weights, 0.002 bits) -> ``fp8``; ``awq`` / ``gptq`` at 4 bits in groups of 128
    -> ``int4_g128``.

    Raises:
        DesignError: another method, bit width or group size, naming the key."""
    from .errors import DesignError

    if not qc:
        return "auto"
    if not isinstance(qc, dict):
        raise DesignError(f"quantization_config={qc!r} must be an object")
    method = qc.get("quant_method")
    if method == "fp8":
        return "fp8"
    if method in ("awq", "gptq") and qc.get("bits") == 4 and qc.get("group_size") == 128:
        return "int4_g128"
    raise DesignError(f"quantization_config (quant_method={method!r}, bits={qc.get('bits')!r}, "
                      f"group_size={qc.get('group_size')!r}) is not a weight format the zoo "
                      "prices: fp8, or awq / gptq at 4 bits in groups of 128 (model.weight_dtype "
                      "sets one)")
