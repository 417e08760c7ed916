"""A design's ``rope_scaling``: the RoPE rescalings the zoo implements (``zoo.rope_tables``) and
the keys each needs, checked when a design is made (``ModelConfig.validate``) so that a scaling
the tables cannot build is refused by name before any work, not met as a ``KeyError`` in a
trial. The keys are transformers' (``modeling_rope_utils``: ``_validate_*_parameters``).
"""

from __future__ import annotations

import math

from .errors import DesignError

# "default": no rescaling (a design's rope_scaling is then null)
ROPE_TYPES = ("default", "llama3", "linear", "yarn")
NEEDS = {"linear": ("factor",), "yarn": ("factor", "original_max_position_embeddings"),
         "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                    "original_max_position_embeddings")}


def check(rs) -> None:
    """Refuse a ``rope_scaling`` (a mapping or None) of another type than ``NEEDS``' (named by
    ``rope_type``), without a key its type needs, or whose factors are not positive numbers or
    whose ``original_max_position_embeddings`` is not a positive integer.

    Raises:
        DesignError: naming ``rope_scaling.KEY`` and its value.
    """
    if rs is None:
        return
    if not isinstance(rs, dict):
        raise DesignError(f"rope_scaling must be a mapping or null, got {rs!r}")
    rtype = rs.get("rope_type")
    if rtype not in NEEDS:
        raise DesignError(f"rope_scaling.rope_type={rtype!r} is not one of {', '.join(NEEDS)} "
                          "(no rescaling: rope_scaling=null)")
    missing = [k for k in NEEDS[rtype] if rs.get(k) is None]
    if missing:
        raise DesignError(f"rope_scaling (rope_type={rtype}) has no {', '.join(missing)}: "
                          f"{rtype} needs {', '.join(NEEDS[rtype])}")
    for k in ("factor", "low_freq_factor", "high_freq_factor"):
        v = rs.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not (v > 0 and math.isfinite(v))):
            raise DesignError(f"rope_scaling.{k} must be a positive number, got {v!r}")
    v = rs.get("original_max_position_embeddings")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
        raise DesignError(f"rope_scaling.original_max_position_embeddings must be a positive "
                          f"integer, got {v!r}")
