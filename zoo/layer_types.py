"""Which layers attend locally: a design's ``layer_types``, spelled once, and its rules.

A local layer attends to the ``sliding_window`` positions ending at its own token (the token
included: key ``j`` for query ``i`` when ``i - window < j <= i``, as transformers'
``sliding_window_causal_mask``, Mistral, gpt-oss and Gemma 3 build it); a global layer attends to
every earlier position. ``ModelConfig.layer_types`` holds one character per layer, ``L`` (local)
or ``G`` (global); a ratio ``"R:G"``: ``R`` local layers then ``G`` global ones, repeated from
layer 0 and cut at ``n_layers`` (Gemma 3's five local per global layer is ``"5:1"``, gpt-oss's
alternation ``"1:1"``), which holds at any depth; or ``""``: every layer alike, local when the
design has a ``sliding_window`` (Mistral-7B-v0.1), else global. Canonical: a pattern that is a
ratio's is spelled as the ratio (so a depth change keeps it), any other as its letters;
transformers' list (``["sliding_attention", "full_attention", ...]``) is accepted on input.
"""

from __future__ import annotations

from .errors import DesignError

LOCAL, GLOBAL = "L", "G"
HF_NAMES = {"sliding_attention": LOCAL, "full_attention": GLOBAL}
HF_OF = {v: k for k, v in HF_NAMES.items()}


def expand(value: str, n_layers: int) -> str:
    """The ``L`` / ``G`` letter of each of ``n_layers`` layers of a canonical ``layer_types``
    (``""``: ``""``)."""
    if ":" not in value:
        return value
    r, g = (int(p) for p in value.split(":"))
    return ((LOCAL * r + GLOBAL * g) * n_layers)[:n_layers]


def _as_ratio(kinds: str) -> str:
    """``kinds`` as the shortest ratio ``"R:G"`` (R, G >= 1) that spells it, or itself."""
    n = len(kinds)
    for period in range(2, n + 1):
        r = len(kinds[:period]) - len(kinds[:period].lstrip(LOCAL))
        if 1 <= r < period and expand(f"{r}:{period - r}", n) == kinds:
            return f"{r}:{period - r}"
    return kinds


def letters(value, n_layers: int) -> str:
    """The ``L`` / ``G`` letter of each of ``n_layers`` layers from any accepted spelling of
    ``layer_types`` (a ratio, letters, or transformers' list; not ``""``).

    Raises:
        DesignError: an unknown layer type, a ratio that is not two non-negative integers with a
            positive sum, or a pattern whose length is not ``n_layers``, naming ``layer_types``.
    """
    if isinstance(value, str) and ":" in value:
        try:
            r, g = (int(p) for p in value.split(":"))
        except ValueError:
            raise DesignError(f"layer_types={value!r}: a ratio is 'local:global', two "
                              "integers (e.g. '5:1')") from None
        if r < 0 or g < 0 or r + g == 0:
            raise DesignError(f"layer_types={value!r}: a ratio needs non-negative counts with a "
                              "positive sum")
        value = expand(f"{r}:{g}", n_layers)
    elif not isinstance(value, str):
        try:
            names = list(value)
        except TypeError:
            raise DesignError(f"layer_types must be a string or a list, got {value!r}") from None
        bad = sorted({str(t) for t in names} - set(HF_NAMES))
        if bad:
            raise DesignError(f"layer_types: {', '.join(bad)} not one of "
                              f"{', '.join(HF_NAMES)}")
        value = "".join(HF_NAMES[t] for t in names)
    if set(value) - {LOCAL, GLOBAL}:
        raise DesignError(f"layer_types={value!r}: one character per layer, L (local, sliding "
                          "window) or G (global), or a ratio such as '5:1'")
    if len(value) != n_layers:
        raise DesignError(f"layer_types has {len(value)} entries, n_layers is {n_layers}: one "
                          "per layer")
    return value


def canonical(value, n_layers: int) -> str:
    """``layer_types`` in its canonical spelling (module doc): a ratio ``"R:G"``, a string of
    ``L`` / ``G`` (one per layer) that no ratio spells, or ``""`` for every layer alike.

    Raises:
        DesignError: what ``letters`` refuses.
    """
    if value is None or value == "" or value == []:
        return ""
    value = letters(value, n_layers)
    return "" if set(value) == {LOCAL} else _as_ratio(value)


def check(cfg) -> None:
    """Refuse an impossible window or pattern (``ModelConfig.validate``), naming the field.

    Raises:
        DesignError: ``sliding_window`` not a positive integer (0 is refused: no window is
            ``null``), a local layer without a window, ``attn_sinks`` / ``out_bias`` not booleans.
    """
    w = cfg.sliding_window
    if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w <= 0):
        raise DesignError(f"sliding_window must be a positive integer (positions) or null, "
                          f"got {w!r}")
    if LOCAL in expand(cfg.layer_types, cfg.n_layers) and w is None:
        raise DesignError(f"layer_types={cfg.layer_types!r} has local layers but "
                          "sliding_window is null: set the window they attend over")
    for f in ("attn_sinks", "out_bias"):
        if not isinstance(getattr(cfg, f), bool):
            raise DesignError(f"{f} must be true or false, got {getattr(cfg, f)!r}")


def window(cfg, layer: int) -> int | None:
    """The window block ``layer`` attends over, or None for full attention: a global layer, or
    a window at least ``max_seq_len`` (accepted, and the same as full attention: no position is
    ever outside it)."""
    w = cfg.sliding_window
    if w is None or w >= cfg.max_seq_len:
        return None
    local = expand(cfg.layer_types, cfg.n_layers)[layer] == LOCAL if cfg.layer_types else True
    return w if local else None


def declared_local(cfg, layer: int) -> bool:
    """Whether block ``layer`` is declared local (``L``, or every layer of a design with a
    ``sliding_window`` and no pattern), whatever its window's size: the layer's RoPE base
    (``rope_local_theta``) follows the declaration, as transformers' ``layer_types`` does."""
    if cfg.sliding_window is None:
        return False
    return expand(cfg.layer_types, cfg.n_layers)[layer] == LOCAL if cfg.layer_types else True


def to_hf(cfg) -> list[str]:
    """transformers' ``layer_types`` list of a design."""
    return [HF_OF[LOCAL if declared_local(cfg, i) else GLOBAL] for i in range(cfg.n_layers)]
