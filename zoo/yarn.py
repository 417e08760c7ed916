"""YaRN's magnitude scale (Peng et al. 2023, arXiv:2309.00071), torch-free: the RoPE tables
(``zoo.rope_tables``) scale cos / sin by it, and DeepSeek-V2's softmax scale takes it squared
(``zoo.hf_deepseek``)."""

from __future__ import annotations

import math


def mscale(factor: float, m: float = 1.0) -> float:
    """``0.1 m ln(factor) + 1`` for a context extended by ``factor`` > 1, else 1 (transformers'
    ``get_mscale`` / ``yarn_get_mscale``)."""
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
