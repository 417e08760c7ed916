"""The MoE grouped GEMMs (``kernels.moe``) against their PyTorch reference: the device-side sort
by expert, every slot computed once, any routing (skewed, one expert, every expert), decode and
prefill sizes; a CUDA graph captures the layer (GPU)."""

import pytest
import torch

from kernels import moe_align, moe_route
from kernels import moe_gemm as moe
from tests.kernels.conftest import DEVICE


def _case(M, d, F, E, k, skew=0.0, seed=0, dtype=torch.float32, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(M, d, generator=g).to(device, dtype)
    w13 = (torch.randn(E, 2 * F, d, generator=g) * d ** -0.5).to(device, dtype)
    w2 = (torch.randn(E, d, F, generator=g) * F ** -0.5).to(device, dtype)
    logits = torch.randn(M, E, generator=g) - skew * torch.arange(E)  # skew: low ids favoured
    w, idx = torch.topk(torch.softmax(logits, -1), k, dim=-1)
    return h, w13, w2, w.to(device, dtype), idx.to(device)


def test_align_places_every_slot_once_in_its_experts_blocks():
    _, _, _, _, idx = _case(7, 8, 8, 5, 3, skew=1.0)
    ids, bexp = moe.align(idx, 5, 4)
    S = idx.numel()
    placed = ids[ids < S]
    assert sorted(placed.tolist()) == list(range(S))  # each slot once
    flat = idx.reshape(-1)
    for b, e in enumerate(bexp.tolist()):
        block = ids[b * 4:(b + 1) * 4]
        real = block[block < S].long()
        if e == 5:
            assert real.numel() == 0
        else:
            assert (flat[real] == e).all()
    assert ids.numel() == 4 * (-(-S // 4) + 5)


@pytest.mark.parametrize("M,E,k,skew", [(1, 4, 2, 0.0), (3, 8, 2, 0.0), (5, 6, 3, 3.0),
                                        (40, 4, 2, 0.0), (6, 5, 5, 0.0)])
def test_the_grouped_gemms_match_the_reference(M, E, k, skew):
    h, w13, w2, w, idx = _case(M, 32, 24, E, k, skew=skew, seed=M)
    torch.testing.assert_close(moe.moe_experts(h, w13, w2, w, idx),
                               moe.reference(h, w13, w2, w, idx), rtol=1e-4, atol=1e-4)


def test_one_expert_for_every_token():
    h, w13, w2, w, _ = _case(9, 32, 24, 4, 1)
    idx = torch.full((9, 1), 2, device=DEVICE)
    torch.testing.assert_close(moe.moe_experts(h, w13, w2, w, idx),
                               moe.reference(h, w13, w2, w, idx), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 8, 64, 1024])
def test_bf16_on_the_gpu_and_under_a_graph(M):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    h, w13, w2, w, idx = _case(M, 2048, 768, 64, 8, device="cuda", dtype=torch.bfloat16)
    ref = moe.reference(h.float(), w13.float(), w2.float(), w.float(), idx)
    got = moe.moe_experts(h, w13, w2, w, idx)
    torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=2e-2)
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        moe.moe_experts(h, w13, w2, w, idx)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        out = moe.moe_experts(h, w13, w2, w, idx)
    new = _case(M, 2048, 768, 64, 8, seed=9, device="cuda", dtype=torch.bfloat16)
    for dst, src in zip((h, w13, w2, w, idx), new):
        dst.copy_(src)
    graph.replay()
    torch.testing.assert_close(out.float(), moe.reference(*(t.float() if t.is_floating_point()
                                                             else t for t in new)),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("M,E,k,renorm", [(1, 8, 2, True), (37, 64, 8, False), (600, 128, 8, True),
                                          (300, 6, 6, True), (70, 256, 8, False)])
def test_a_long_prompts_rows_route_like_torch(M, E, k, renorm):
    """``kernels.moe_align.route_rows`` (one launch over blocks of rows): the softmax's top k
    (renormalised or not) as ``torch.topk`` gives them; under a draw, the logits unread, the
    prior's inclusion frequencies (``zoo.routing``), the seed advanced once a call; more experts
    than it takes refused."""
    import math

    from kernels import moe_align
    from zoo import routing

    logits = torch.randn(M, E, generator=torch.Generator().manual_seed(M + E)).to(DEVICE)
    w, idx = moe_align.route_rows(logits, k, renorm, torch.float32)
    rw, ridx = torch.topk(torch.softmax(logits, -1), k, -1)
    if renorm:
        rw = rw / rw.sum(-1, keepdim=True)
    assert torch.equal(idx, ridx)
    torch.testing.assert_close(w, rw, rtol=1e-6, atol=1e-7)
    if M < 300:
        return
    prior = torch.tensor(routing.zipf_prior(E, 1.0), dtype=torch.float32).log().to(DEVICE)
    seed = torch.tensor([11], dtype=torch.int64, device=DEVICE)
    nan = torch.full((M, E), math.nan, device=DEVICE)
    picks = torch.cat([moe_align.route_rows(nan, k, renorm, torch.float32, draw=(prior, seed))[1]
                       for _ in range(8)]).cpu()
    assert seed.item() == 19
    freq = torch.bincount(picks.reshape(-1), minlength=E).float() / picks.shape[0]
    assert torch.allclose(freq, torch.tensor(routing.inclusion(E, k, 1.0)), atol=0.05), freq
    with pytest.raises(ValueError, match="more than 256"):
        moe_align.route_rows(torch.zeros(2, 257, device=DEVICE), 2, True, torch.float32)


def _same_runs(ids, bexp, want_ids, want_bexp, block, S):
    """Two sorts by expert agree up to the order inside each expert's run: the blocks' experts,
    the padding's places (id ``S``) and each run's slots (sorted by (expert, id))."""
    assert torch.equal(bexp, want_bexp) and ids.shape == want_ids.shape
    assert torch.equal(ids == S, want_ids == S)
    run = bexp.long().repeat_interleave(block) * (S + 1)
    assert torch.equal((run + ids.long()).sort().values, (run + want_ids.long()).sort().values)


@pytest.mark.parametrize("M,k,E", [(3, 2, 8), (512, 8, 128), (700, 4, 6), (2000, 8, 257),
                                   (300, 8, 64)])
def test_the_counting_sort_sorts_like_align(M, k, E, monkeypatch):
    """``kernels.moe_align.align`` (two launches, ``zoo.moe.ALIGN_LAUNCHES``): each block's
    expert as ``align`` gives it, the padding at the same places, and each expert's run the same
    slots (``_same_runs``: their order inside a run, so which of an expert's blocks holds a slot,
    is the atomics'; on an H200, 2026-11-28, comparing block by block failed where an expert's
    run spans blocks); called again with other experts (its counters left as it needs them);
    most tokens sent to the same experts; the grouped GEMMs on its sort give ``reference``'s
    output; ``zoo.moe.align_block`` is ``tiles``' block. (The interpreter runs the programs one
    after another, in the reference's order.)"""
    from kernels import moe_align
    from zoo import moe as zoo_moe

    calls = []
    for name in ("_count_kernel", "_place_kernel"):
        kern = getattr(moe_align, name)
        monkeypatch.setattr(moe_align, name, type("Counted", (), {"__getitem__": lambda _, grid,
                            kern=kern: (calls.append(1), kern[grid])[1]})())
    g = torch.Generator().manual_seed(M + E)
    for n_exp in (E, 2 * E + 1):  # the buffers the first call left, taken by another router
        idx = torch.stack([torch.randperm(n_exp, generator=g)[:k] for _ in range(M)]).to(DEVICE)
        block = moe.tiles(M * k, n_exp)[0]
        assert zoo_moe.align_block(M * k, n_exp) == block
        ids, bexp = moe_align.align(idx, n_exp, block)
        want_ids, want_bexp = moe.align(idx, n_exp, block)
        _same_runs(ids, bexp, want_ids, want_bexp, block, M * k)
    assert len(calls) == 2 * zoo_moe.ALIGN_LAUNCHES
    idx[: M * 9 // 10] = torch.arange(k, device=DEVICE)  # most tokens to the same k experts
    block = moe.tiles(M * k, n_exp)[0]
    ids, bexp = moe_align.align(idx, n_exp, block)
    want_ids, want_bexp = moe.align(idx, n_exp, block)
    _same_runs(ids, bexp, want_ids, want_bexp, block, M * k)
    if M <= 300:
        h, w13, w2, w, idx = _case(M, 32, 16, E, k, device=DEVICE)
        got = moe.moe_experts(h, w13, w2, w, idx)  # the counting sort inside
        torch.testing.assert_close(got, moe.reference(h, w13, w2, w, idx), rtol=1e-4, atol=1e-5)


def test_the_fused_routings_refuse_a_step_past_their_limits():
    """``route_align`` past 512 slots and ``router_route`` past 8 tokens: a ValueError naming the
    kernel and the step, before any launch (the model never calls them so: ``fused_route``)."""
    with pytest.raises(ValueError, match="route_align: 520 slots over 8 experts"):
        moe.route_align(torch.zeros(65, 8, device=DEVICE), 8, True, 16, torch.float32)
    with pytest.raises(ValueError, match="router_route: 9 tokens, top 2 of 8 experts"):
        moe_route.router_route(torch.zeros(9, 16, device=DEVICE), torch.zeros(8, 16, device=DEVICE),
                               2, True, 16)


def test_the_predictor_holds_the_mirrors_of_the_kernels_limits():
    """The zoo's torch-free mirrors of the kernels' limits (``zoo.moe``) are the kernels'."""
    from zoo import moe as zoo_moe

    for slots in (1, 8, 16, 17, 64, 128, 256, 512, 513):
        for e in (4, 8, 64, 100, 128, 256, 257):
            assert zoo_moe.fused_route(slots, e) == moe.fused_route(slots, e), (slots, e)
    assert zoo_moe.ROUTER_ROUTE_MAX_TOKENS == moe_route.ROUTER_ROUTE_MAX_TOKENS
    assert zoo_moe.ROUTE_ROWS_MAX_EXPERTS == moe_align.ROUTE_ROWS_MAX_EXPERTS
    assert zoo_moe.SUM_IN_DOWN_MAX_TOKENS == moe.SUM_IN_DOWN_MAX_TOKENS
    for tokens in (1, 2, 8, 9, 64):
        for e, k in ((8, 2), (64, 8), (128, 8), (257, 8)):
            assert zoo_moe.fused_router(tokens, e, k) == moe_route.fused_router(tokens, e, k)
            assert zoo_moe.sum_in_down(tokens, e, k) == moe.sum_in_down(tokens, e, k)
    for slots in (1, 1024, 1025, 4096, 16383, 16384, 65536):
        for e in (8, 64, 128):
            assert zoo_moe.block_rows(slots, e) == moe.tiles(slots, e)[0], (slots, e)


@pytest.mark.parametrize("renorm", [False, True])
def test_the_fused_top_k_breaks_ties_to_the_lowest_expert(renorm):
    """Tied probabilities (logits of four values over 64 experts): ``route_align`` and
    ``route_rows`` pick the k largest with ties to the lowest expert (a stable sort's order),
    and each weight is the pick's probability (over the k picks' sum: renorm)."""
    from kernels import moe_align

    M, E, k = 6, 64, 8
    logits = torch.randint(0, 4, (M, E), generator=torch.Generator().manual_seed(7)).float()
    p = torch.softmax(logits, -1)
    ridx = torch.sort(p, dim=-1, descending=True, stable=True).indices[:, :k]
    rw = p.gather(-1, ridx)
    if renorm:
        rw = rw / rw.sum(-1, keepdim=True)
    logits = logits.to(DEVICE)
    for w, idx in (moe.route_align(logits, k, renorm, 16, torch.float32)[:2],
                   moe_align.route_rows(logits, k, renorm, torch.float32)):
        assert torch.equal(idx.cpu(), ridx)
        torch.testing.assert_close(w.cpu(), rw, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("M,E,k,renorm", [(1, 8, 2, True), (3, 64, 8, False), (8, 128, 8, True),
                                          (64, 64, 8, False), (5, 6, 6, True)])
def test_the_fused_routing_and_sort_match_torch(M, E, k, renorm):
    """``route_align`` (one launch): the softmax's top k (weights renormalised or not) and the
    slots' sort by expert, as ``torch.topk`` and ``align`` give them."""
    logits = torch.randn(M, E, generator=torch.Generator().manual_seed(M * E)).to(DEVICE)
    w, idx, ids, bexp = moe.route_align(logits, k, renorm, 16, torch.float32)
    rw, ridx = torch.topk(torch.softmax(logits, -1), k, -1)
    if renorm:
        rw = rw / rw.sum(-1, keepdim=True)
    assert torch.equal(idx, ridx)
    torch.testing.assert_close(w, rw, rtol=1e-6, atol=1e-7)
    want_ids, want_bexp = moe.align(ridx, E, 16)
    assert torch.equal(ids, want_ids) and torch.equal(bexp, want_bexp)


@pytest.mark.parametrize("M,d,E,k,renorm,eg", [(1, 96, 8, 2, True, 4), (3, 200, 64, 8, False, 8),
                                               (8, 64, 128, 8, True, 4), (2, 130, 6, 6, True, 4),
                                               (2, 1100, 16, 4, True, None)])
def test_the_router_gemm_routing_and_sort_in_one_launch(M, d, E, k, renorm, eg):
    """``router_route``: the router's GEMM spread over programs, the last one routing and sorting
    the logits (``route_align``'s numerics) in the same launch; called twice (its counter left
    at zero); the same routing as the router's ``F.linear`` then ``route_align``; ``eg`` None:
    the default tile the model launches (one expert a program, ``d`` in chunks of up to 2048:
    1100 in one); several chunks with ``block_k=64``; a router of another width refused."""
    g = torch.Generator().manual_seed(M * d + E)
    h = torch.randn(M, d, generator=g).to(DEVICE)
    wr = (torch.randn(E, d, generator=g) * d ** -0.5).to(DEVICE)
    want = moe.route_align(torch.nn.functional.linear(h, wr), k, renorm, 16, torch.float32)
    for _ in range(2):
        got = (moe_route.router_route(h, wr, k, renorm, 16) if eg is None else
               moe_route.router_route(h, wr, k, renorm, 16, block_eg=eg, block_k=64))
        assert torch.equal(got[1], want[1])
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
        assert torch.equal(got[2], want[2]) and torch.equal(got[3], want[3])
    with pytest.raises(ValueError, match="does not take d"):
        moe_route.router_route(h, wr[:, 1:], k, renorm, 16)


@pytest.mark.parametrize("one_launch", [False, True])
def test_a_routing_skew_is_drawn_inside_the_fused_routing(one_launch):
    """Under a routing skew ``route_align`` and ``router_route`` draw each token's experts in the
    logits' place (``draw=(log_prior, seed)``): the logits unread (NaN given), every expert
    included as often as the Zipf prior says (``zoo.routing.inclusion``, 8 x 60 tokens), the k
    experts of a token distinct, the weights renormalised, the sort that of ``align``; the
    layer's counter advanced once a call, and a counter set back draws the same again."""
    import math

    from zoo import routing

    E, k, M, calls, skew = 8, 2, 8, 60, 1.5
    prior = torch.tensor(routing.zipf_prior(E, skew), dtype=torch.float32).log().to(DEVICE)
    seed = torch.tensor([7], dtype=torch.int64, device=DEVICE)
    g = torch.Generator().manual_seed(3)
    h, wr = torch.randn(M, 24, generator=g).to(DEVICE), torch.randn(E, 24, generator=g).to(DEVICE)
    nan = torch.full((M, E), math.nan, device=DEVICE)

    def call():
        if one_launch:
            return moe_route.router_route(h, wr, k, True, 16, draw=(prior, seed))
        return moe.route_align(nan, k, True, 16, torch.float32, draw=(prior, seed))

    got = [call() for _ in range(calls)]
    assert seed.item() == 7 + calls
    idx = torch.cat([x[1] for x in got]).cpu()
    freq = torch.bincount(idx.reshape(-1), minlength=E).float() / (M * calls)
    assert torch.allclose(freq, torch.tensor(routing.inclusion(E, k, skew)), atol=0.07), freq
    assert (idx[:, 0] != idx[:, 1]).all()
    for w, i, ids, bexp in got[:3]:
        torch.testing.assert_close(w.sum(-1), torch.ones(M, device=DEVICE))
        want_ids, want_bexp = moe.align(i, E, 16)
        assert torch.equal(ids, want_ids) and torch.equal(bexp, want_bexp)
    seed.fill_(7)
    assert torch.equal(call()[1], got[0][1])


@pytest.mark.parametrize("M,E,k", [(1, 8, 2), (8, 128, 8), (5, 64, 8)])
def test_the_draw_spread_over_the_router_programs_is_route_aligns(M, E, k):
    """``router_route`` draws each program's experts (the last one reads them all), where
    ``route_align`` routes a draw made a program a token (``moe_align.draw_logits``): at the same
    seed the same Philox numbers, so the same experts and sort (the weights to float32's
    rounding); each advances the counter once."""
    from zoo import routing

    prior = torch.tensor(routing.zipf_prior(E, 0.0), dtype=torch.float32).log().to(DEVICE)
    g = torch.Generator().manual_seed(E)
    h, wr = torch.randn(M, 32, generator=g).to(DEVICE), torch.randn(E, 32, generator=g).to(DEVICE)
    for start in (0, 11):
        s1 = torch.tensor([start], dtype=torch.int64, device=DEVICE)
        s2 = s1.clone()
        one = moe_route.router_route(h, wr, k, True, 16, draw=(prior, s1))
        two = moe.route_align(torch.zeros(M, E, device=DEVICE), k, True, 16, torch.float32,
                              draw=(prior, s2))
        assert s1.item() == s2.item() == start + 1
        w1, *rest1 = one
        w2, *rest2 = two
        for a, b in zip(rest1, rest2):  # the experts and their sort: the same
            assert torch.equal(a, b)
        # the weights from logits drawn in two tile layouts (a fused multiply-add or not)
        torch.testing.assert_close(w1.float(), w2.float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("M,d,F,E,k", [(1, 64, 32, 8, 2), (5, 48, 40, 6, 3), (8, 64, 32, 16, 8)])
def test_the_slots_sum_in_the_down_launch(M, d, F, E, k):
    """``moe_down(sum_k=k)``: each token's k slots summed by the program that finishes its last
    one (per column tile), in the same launch; twice (its counters left at zero); the same as
    the slots summed after (``moe_experts``' default)."""
    h, w13, w2, w, idx = _case(M, d, F, E, k, seed=M + E)
    want = moe.moe_experts(h, w13, w2, w, idx)
    tile = (16, 16, 32, 4, 2)  # several column tiles: one counter per (token, tile)
    for _ in range(2):
        got = moe.moe_experts(h, w13, w2, w, idx, tile=tile, sum_in_down=True)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_model_draws_a_uniform_routing_inside_its_fused_routing():
    """``workload.routing=uniform`` on the Triton path (``zoo.experts``): a decode step of few
    tokens draws inside ``router_route``, a step of more inside ``route_align``, a long prompt's
    inside ``route_rows``; one input for every token (the router as built would pick the same two
    experts) reaches every expert about evenly, and each call advances the layer's counter once."""
    from zoo import ModelConfig, Transformer
    from zoo.experts import MoEFeedForward, set_routing_skew

    cfg = ModelConfig.from_name("tiny", n_experts=6, n_experts_active=2, expert_ffn_dim=40,
                                kernels="triton", dtype="fp32", kv_dtype="fp32")
    model = Transformer.build(cfg, DEVICE, seed=0)
    set_routing_skew(model, 0.0, draw=True)
    layer = next(m for m in model.modules() if isinstance(m, MoEFeedForward))
    start = layer.seed.item()
    layer.record = []
    with torch.no_grad():
        for tokens in [4] * 30 + [16] * 8 + [300]:  # router_route, route_align, route_rows
            layer(torch.ones(1, tokens, cfg.d_model, device=DEVICE))
    assert layer.seed.item() == start + 39
    idx = torch.cat([i.reshape(-1) for i in layer.record]).cpu()
    freq = torch.bincount(idx, minlength=6).float() / (idx.numel() / 2)
    assert torch.allclose(freq, torch.full((6,), 1 / 3), atol=0.09), freq


_PDL_PTX = """
from kernels import moe_gemm, moe_route
types = dict(x_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", a_ptr="*bf16", rw_ptr="*bf16",
             sum_ptr="*bf16", h_ptr="*bf16", wr_ptr="*bf16", lg_ptr="*fp32", dr_ptr="*fp32",
             prior_ptr="*fp32",
             idx_ptr="*i64", seed_ptr="*i64")
for k, const in ((moe_gemm._moe_up_kernel, dict(TOPK=8, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128,
                                                 PREC="tf32", PDL=True)),
                 (moe_gemm._moe_down_kernel, dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128,
                                                   PREC="tf32", SUM=True, TOPK=8, BLOCK_J=8,
                                                   PDL=True)),
                 (moe_route._router_route_kernel, dict(TOPK=8, RENORM=True, BLOCK_M=1, BLOCK_E=128,
                                                       BLOCK_S=16, BLOCK_B=16, BM=16, BLOCK_EG=1,
                                                       BLOCK_K=2048, DRAW=False, PDL=True))):
    ptx(k, {n: types.get(n, "*i32" if n.endswith("_ptr") else "i32") for n in k.arg_names}, const)
"""


def test_the_decode_moe_kernels_load_nothing_before_their_pdl_wait():
    """``_moe_up_kernel``, ``_moe_down_kernel`` (with the slots' sum) and
    ``_router_route_kernel`` under PDL, compiled for an H100/H200 (sm_90; no GPU needed): no
    global load before ``griddepcontrol.wait`` (a load there could read the routing or the
    activations before the kernel before it wrote them), ``griddepcontrol.launch_dependents``
    after it."""
    import re

    from tests.kernels.sm90 import sm90_ptx

    ptxs = sm90_ptx(_PDL_PTX)
    assert len(ptxs) == 3
    for ptx in ptxs:
        wait = ptx.find("griddepcontrol.wait")
        assert wait > 0 and ptx.find("griddepcontrol.launch_dependents") > wait
        assert not re.findall(r"\b(ld\.global|cp\.async|atom\.global)", ptx[:wait])
        assert re.findall(r"\b(ld\.global|cp\.async)", ptx[wait:])
