"""DeepSeek-V2's ``config.json`` (``model_type: deepseek_v2``) read as transformers 5 reads it:
multi-head latent attention (``zoo.latent``) and DeepSeekMoE (routed experts by softmax top-k,
unnormalised as transformers' ``DeepseekV2TopkRouter`` leaves them, plus ungated shared experts,
the first layers dense). Called by ``zoo.hf_config``; torch-free.
"""

from __future__ import annotations

from typing import Any

from .errors import DesignError
from .yarn import mscale


def fields(hf: dict, rope: dict | None) -> dict[str, Any]:
    """The MLA and MoE fields of a DeepSeek-V2 config; ``rope`` its rope dict as read
    (``zoo.hf_config._rope``'s scaling, or None): YaRN's ``mscale_all_dim`` squared scales the
    softmax, as transformers' ``yarn_apply_mscale``.

    Raises:
        DesignError: what the zoo does not run, by key: a top-k method other than ``greedy``,
            ``routed_scaling_factor`` other than 1, a scoring function other than softmax, MoE
            layers at a stride (``moe_layer_freq``).
    """
    if hf.get("topk_method", "greedy") != "greedy":
        raise DesignError(f"topk_method={hf['topk_method']!r}: only greedy top-k is modelled")
    if float(hf.get("routed_scaling_factor", 1.0)) != 1.0:
        raise DesignError(f"routed_scaling_factor={hf['routed_scaling_factor']}: routing weights "
                          "scaled after top-k are not modelled")
    if hf.get("scoring_func", "softmax") != "softmax":
        raise DesignError(f"scoring_func={hf['scoring_func']!r}: only a softmax router is "
                          "modelled")
    if hf.get("moe_layer_freq", 1) != 1:
        raise DesignError(f"moe_layer_freq={hf['moe_layer_freq']}: MoE layers at a stride are "
                          "not modelled")
    nope, rope_dim = hf["qk_nope_head_dim"], hf["qk_rope_head_dim"]
    scale = (nope + rope_dim) ** -0.5
    if rope and rope.get("mscale_all_dim"):
        scale *= mscale(rope["factor"], rope["mscale_all_dim"]) ** 2
    out = dict(n_kv_heads=hf["num_attention_heads"], head_dim=rope_dim,
               q_lora_rank=hf.get("q_lora_rank") or 0, kv_lora_rank=hf["kv_lora_rank"],
               qk_nope_head_dim=nope, qk_rope_head_dim=rope_dim, v_head_dim=hf["v_head_dim"],
               attn_scale=scale)
    experts = hf.get("n_routed_experts")
    if experts:
        out.update(n_experts=int(experts), n_experts_active=int(hf["num_experts_per_tok"]),
                   expert_ffn_dim=int(hf["moe_intermediate_size"]),
                   n_shared_experts=int(hf.get("n_shared_experts") or 0),
                   first_k_dense=int(hf.get("first_k_dense_replace", 0)), router_renorm=False)
    return out
