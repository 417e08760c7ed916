"""The profiled window of a trial's child: one stage bracketed by ``cudaProfilerStart/Stop``.

Runs inside ``python -m sweep.measure.trial`` when the spec names a ``profile_window`` (the ``ncu`` and
``nsys`` profilers start the child with profiling off and capture only this window).
"""

from __future__ import annotations

DECODE_WINDOW = (2, 3)  # decode steps [A, B) a profiler sees, unless options.ncu_decode_steps


def options(spec: dict) -> dict:
    """The trial's ``profile.options`` (empty without a profile)."""
    return (spec.get("profile") or {}).get("options", {})


def profiled_window(gen, prompt, spec: dict) -> dict:
    """Run one stage between ``cudaProfilerStart/Stop`` for a profiler started with profiling
    off (``ncu --profile-from-start off``): the prefill once, or decode steps ``A..B``
    (``profile.options.ncu_decode_steps``) after the warm-up and graph capture.

    Args:
        gen: a ``zoo.Generator`` over the built design.
        prompt: ``[B, T]`` int64 token ids on the GPU.
        spec: the trial spec; ``spec["profile_window"]`` is ``prefill`` or ``decode``.

    With ``spec["ncu_sample"]`` (a list of layer indices) only those layers and the LM head are
    bracketed (forward hooks start and stop the profiler), and decode profiles step ``A`` only.
    Returns ``{"profile_window", "profiled_steps", "sampled_layers"}``.

    Raises:
        ValueError: a sampled layer index out of range.
    """
    import torch

    stage = spec["profile_window"]
    a, b = options(spec).get("ncu_decode_steps", DECODE_WINDOW)
    sample = spec.get("ncu_sample")
    if sample is not None:
        b = a + 1
    tok = gen.prefill(prompt).argmax(-1, keepdim=True)  # warm-up (and graph capture below)
    for _ in range(b):
        tok = gen.decode_greedy(tok)
    torch.cuda.synchronize()
    T = prompt.shape[1]
    hooks = []
    model = gen.model
    if sample is not None:
        bad = [i for i in sample if not 0 <= i < len(model.layers)]
        if bad:
            raise ValueError(f"ncu_detail_layers {bad} out of range for {len(model.layers)} layers")

    def begin():
        if sample is None:
            torch.cuda.profiler.start()
            return
        start = (lambda *_: torch.cuda.profiler.start())
        stop = (lambda *_: torch.cuda.profiler.stop())
        for i in sample:
            hooks.extend([model.layers[i].register_forward_pre_hook(start),
                          model.layers[i].register_forward_hook(stop)])
        hooks.append(model.output.register_forward_pre_hook(start))

    try:
        if stage == "prefill":
            begin()
            gen.prefill(prompt).argmax(-1)
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            return {"profile_window": stage, "profiled_steps": 1, "sampled_layers": sample}
        gen.pos = T
        for i in range(b):
            if i == a:
                torch.cuda.synchronize()
                begin()
            tok = gen.decode_greedy(tok)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    finally:
        for h in hooks:
            h.remove()
    return {"profile_window": stage, "profiled_steps": b - a, "first_step_cache_len": T + a,
            "sampled_layers": sample}
