"""A Hugging Face ``config.json``'s values checked before they are read (``zoo.hf_config``): each
key the zoo reads holds a value of its type, and a size is a size. ``transformers`` 5 refuses the
same files through its strict config dataclasses (``StrictDataclassFieldValidationError``); the
zoo refuses them by key, where a lenient read would build another model (``"false"`` read as
true by ``bool``, a ``num_key_value_heads`` of 0 read as "not given": multi-head attention).
"""

from __future__ import annotations

from .errors import DesignError

# counts read as integers; those of them that are sizes must also be >= 1 when given
INT_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
            "original_max_position_embeddings", "sliding_window", "max_window_layers",
            "num_local_experts", "num_experts", "n_routed_experts", "n_shared_experts",
            "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
            "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
            "qk_rope_head_dim", "v_head_dim", "sliding_window_pattern")
# counts that may be 0 (a first dense layer index, no shared expert, ...); every other is a size
MAY_BE_0 = ("sliding_window", "max_window_layers", "n_shared_experts", "decoder_sparse_step",
            "first_k_dense_replace")
SIZE_KEYS = tuple(k for k in INT_KEYS if k not in MAY_BE_0)
FLOAT_KEYS = ("rope_theta", "rms_norm_eps", "rope_local_base_freq", "routed_scaling_factor",
              "query_pre_attn_scalar", "partial_rotary_factor")
BOOL_KEYS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window",
             "norm_topk_prob")
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def check_types(hf: dict, where: str) -> None:
    """Refuse, naming the key, a config whose counts (``INT_KEYS``) are not integers or whose
    sizes (``SIZE_KEYS``) are below 1, whose real numbers (``FLOAT_KEYS``) are not numbers, whose
    switches (``BOOL_KEYS``) are not ``true`` / ``false``, whose ``torch_dtype`` / ``dtype`` is not
    one of ``DTYPES``, whose ``rope_scaling`` / ``rope_parameters`` is not an object (a list was
    read as no scaling at all), or that rotates part of each head (``partial_rotary_factor``
    below 1: the zoo's RoPE turns all of ``head_dim``); ``where`` names the file.

    Raises:
        DesignError: the first such key, with its value.
    """
    for k in INT_KEYS:
        v = hf.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise DesignError(f"{where}: {k}={v!r} must be an integer")
        if v is not None and k in SIZE_KEYS and v < 1:
            raise DesignError(f"{where}: {k}={v} must be at least 1 (a key left out takes its "
                              "family's default; 0 is not one)")
    for k in FLOAT_KEYS:
        v = hf.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise DesignError(f"{where}: {k}={v!r} must be a number")
    for k in BOOL_KEYS:
        if hf.get(k) is not None and not isinstance(hf[k], bool):
            raise DesignError(f"{where}: {k}={hf[k]!r} must be true or false (JSON booleans; a "
                              "string is not read as one)")
    for k in ("torch_dtype", "dtype"):
        if hf.get(k) is not None and hf[k] not in DTYPES:
            raise DesignError(f"{where}: {k}={hf[k]!r} is not one of {', '.join(DTYPES)} (a "
                              "quantized checkpoint states its format in quantization_config)")
    for k in ("rope_scaling", "rope_parameters"):
        if hf.get(k) is not None and not isinstance(hf[k], dict):
            raise DesignError(f"{where}: {k}={hf[k]!r} must be an object "
                              "({\"rope_type\": ..., \"factor\": ...}) or null")
    for k, v in [("partial_rotary_factor", hf.get("partial_rotary_factor"))] + [
            (f"{k}.partial_rotary_factor", hf[k].get("partial_rotary_factor"))
            for k in ("rope_scaling", "rope_parameters") if isinstance(hf.get(k), dict)]:
        if v is not None and v != 1:
            raise DesignError(f"{where}: {k}={v!r}: RoPE over part of each head is not modelled "
                              "(the zoo rotates all of head_dim)")
