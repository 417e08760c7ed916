"""How a mixture-of-experts design's tokens were routed in a trial, measured (issue 38): after
the timed runs, one eager prefill of the trial's prompt and one eager decode step with each MoE
layer keeping its experts (``zoo.experts.MoEFeedForward.record``), so nothing is added to the timed
steps. Beside each figure, what ``zoo.routing`` expects of the workload's ``routing_skew``.
"""

from __future__ import annotations


def routing_stats(gen, prompt, token, skew: float = 0.0) -> dict:
    """The routing figures of one eager prefill of ``prompt [B, T]`` and one decode step of
    ``token [B, 1]`` through ``gen``'s model (a ``zoo.Generator``; its cache is written, as the
    timed runs wrote it):

    - ``moe_prefill_load_max_over_mean``: the busiest expert's tokens over the mean's, per MoE
      layer, averaged over the layers (1 when every expert gets as many);
    - ``moe_prefill_experts_touched``, ``moe_decode_experts_touched``: distinct experts the
      prefill's ``B T`` tokens, and the step's ``B``, reach, per MoE layer, averaged (their
      weights are what the stage reads: ``sweep.analysis.derived`` prices its bytes by them);
    - ``moe_prefill_blocks``, ``moe_decode_blocks``: the blocks of ``zoo.moe.block_rows`` rows
      (``kernels.moe_gemm.tiles``' ``BLOCK_M``) the grouped GEMMs run over, each expert's rows
      padded to whole blocks, per MoE layer, averaged (a routing figure: pricing by them
      was measured worse than by the experts' rows, ``results/reference/heldout_moe_h100.md``);
    - ``..._expected``: ``zoo.routing``'s figures for the design and ``skew`` (the prefill's over
      many tokens: a finite prompt's busiest expert sits above it).

    Returns ``{}`` for a design without MoE layers.
    """
    import torch

    from zoo.experts import MoEFeedForward
    from zoo.moe import block_rows
    from zoo.routing import expected_blocks, expected_touched, load_max_over_mean

    layers = [m for m in gen.model.modules() if isinstance(m, MoEFeedForward)]
    if not layers:
        return {}
    E, k = layers[0].cfg.n_experts, layers[0].cfg.n_experts_active
    B, T = prompt.shape
    for m in layers:
        m.record = []
    try:
        with torch.no_grad():
            gen.prefill_step(prompt)
            pre = [m.record.pop() for m in layers]
            gen.model(token, gen.model.positions[T:T + 1], kv_len=T + 1)
            dec = [m.record.pop() for m in layers]
    finally:
        for m in layers:
            m.record = None
    load = [torch.bincount(i.reshape(-1), minlength=E).float() for i in pre]
    bm_pre, bm_dec = block_rows(B * T * k, E), block_rows(B * k, E)

    def blocks(counts, bm):  # the grouped GEMMs' blocks over the layers, averaged
        return sum(float(torch.ceil(c / bm).sum()) for c in counts) / len(counts)

    return {
        "moe_prefill_blocks": blocks(load, bm_pre),
        "moe_decode_blocks": blocks([torch.bincount(i.reshape(-1), minlength=E) for i in dec],
                                    bm_dec),
        "moe_prefill_blocks_expected": expected_blocks(E, k, B * T, bm_pre, skew),
        "moe_decode_blocks_expected": expected_blocks(E, k, B, bm_dec, skew),
        "moe_prefill_load_max_over_mean": sum((c.max() / c.mean()).item() for c in load)
        / len(load),
        "moe_prefill_experts_touched": sum(int((c > 0).sum()) for c in load) / len(load),
        "moe_decode_experts_touched": sum(torch.unique(i).numel() for i in dec) / len(dec),
        "moe_prefill_load_max_over_mean_expected": load_max_over_mean(E, k, skew),
        "moe_prefill_experts_touched_expected": expected_touched(E, k, B * T, skew),
        "moe_decode_experts_touched_expected": expected_touched(E, k, B, skew),
    }
