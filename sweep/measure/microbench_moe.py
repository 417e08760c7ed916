"""The MoE layer's micro-benchmark (``moe_gemm`` calibration entries): the two grouped GEMMs of
``kernels.moe_gemm`` (``moe_up``: gate and up projections with SwiGLU; ``moe_down``: the down
projection scaled by the routing weight, with the slots' sum in its launch for a step of at most
``SUM_IN_DOWN_MAX_TOKENS`` tokens that ``route_align`` takes) launched as the model's Triton path
launches them, on the
step's tokens sorted by expert with ``tiles``' block, each expert's weights read from DRAM; and
``router_route`` (``kernels.moe_route``: the router's GEMM ``[E, d]``, routing and sort in one
launch, ``N = E``, ``K = d``), as a decode step of few tokens launches it. A step that
``route_align`` routes (``fused_route``: a decode step's) launches its kernels under
programmatic dependent launch where the model does (``kernels.gemv.pdl_supported``), so each
timed call overlaps the one before it in the graph as it overlaps its predecessor in the step
(the decode GEMV's entries are timed the same way); on an H200 the batch-1 steps priced 3.4%
high while these entries were timed without it (``results/reference/moe_h100.md``, 2026-11-28).

The router's choice is uniform at random (``k`` distinct experts per token), as the zoo's random
routers route: the experts a step touches, and the rows each gets, are those of a model of
random weights. Times in s; FLOPs and bytes per call (``bytes``: the touched experts' weights and
the activations, the kernel's minimum DRAM traffic).
"""

from __future__ import annotations

from .microbench import cold_copies, entry

MOST_COPIES = 8  # a small layer's weights are rotated through at most this many copies


def moe_gemms(device: str, tm, rnd, shapes, progress=None) -> list[dict]:
    """``moe_gemm`` entries for ``shapes`` (dicts of ``op`` ``moe_up`` / ``moe_down`` /
    ``router_route``, ``M`` tokens, ``E`` experts, ``k`` per token, an expert's weight ``[N,
    K]``, ``dtype``): one call of the kernel per timing, its inputs rotated through copies
    (``cold_copies``).

    ``tm``, ``rnd``: ``sweep.measure.calibration_run``'s timer and random tensors. Returns rows
    with ``flops`` (``2 M k N K``), ``bytes`` and ``touched`` (the experts the routing chose).

    Raises:
        ValueError: an ``op`` that is none of the three kernels.
    """
    import torch

    from kernels import moe_gemm as K_
    from kernels import moe_route
    from kernels.gemv import pdl_supported

    cuda = device == "cuda"
    pdl = cuda and pdl_supported(torch.device("cuda"))
    rows = []
    for i, sh in enumerate(shapes):
        op, dtype = sh["op"], sh["dtype"]
        M, E, k, N, K = (int(sh[c]) for c in ("M", "E", "k", "N", "K"))
        if op not in ("moe_up", "moe_down", "router_route"):
            raise ValueError(f"moe_gemm op must be moe_up, moe_down or router_route, not {op!r}")
        S, tile = M * k, K_.tiles(M * k, E)
        if op == "router_route":
            rows.append(_router_route(moe_route, tm, rnd, tile, M, E, k, N, K, dtype, cuda, pdl))
            if progress:
                progress(i + 1, len(shapes))
            continue
        sum_k = k if op == "moe_down" and K_.sum_in_down(M, E, k) else 0  # as the model does
        step_pdl = pdl and K_.fused_route(S, E)  # the model's decode-step branch (zoo.experts)
        idx = rnd(M, E, dt=torch.float32).topk(k, dim=-1).indices  # k distinct, uniform
        aligned = K_.align(idx, E, tile[0])
        touched = int(torch.unique(idx).numel())
        w = rnd(M, k).abs()
        x = rnd(M, K) if op == "moe_up" else rnd(S, K)
        wb = x.element_size()
        nbytes = float(touched * N * K * wb + x.numel() * wb
                       + (S * N // 2 if op == "moe_up" else S * N) * wb)
        fns = []
        # copies by the bytes a call reads (the touched experts'), not the whole tensor: eight of
        # OLMoE's 64 experts are 34 MB, inside an H100's L2, and one copy read them warm (its
        # moe_down entry priced a batch-1 step's call at 9 us, ncu read it cold and alone in 16)
        for _ in range(cold_copies(touched * N * K * wb, cuda, cap=MOST_COPIES)):
            wt = rnd(E, N, K)
            if op == "moe_up":
                fns.append(lambda x=x, wt=wt: K_.moe_up(x, wt, k, aligned, tile, pdl=step_pdl))
            else:
                fns.append(lambda x=x, wt=wt: K_.moe_down(x, wt, w, aligned, tile, sum_k=sum_k,
                                                          pdl=step_pdl))
        flops = 2.0 * S * N * K
        sp = tm(fns, duty=flops / nbytes > 100)
        rows.append(entry("moe_gemm", sp, op=op, M=M, E=E, k=k, N=N, K=K, dtype=dtype,
                          flops=flops, bytes=nbytes, touched=touched))
        del fns
        if progress:
            progress(i + 1, len(shapes))
    return rows


def _router_route(moe_route, tm, rnd, tile, M, E, k, N, K, dtype, cuda, pdl) -> dict:
    """One ``router_route`` entry: ``M`` tokens ``[M, K]`` through a router ``[N = E, K]``, the
    routing and sort of their top ``k`` in the same launch (not renormalised: the same kernel),
    the router's weight rotated through copies (``cold_copies``), under PDL with ``pdl``. Bytes:
    the router's weights and the tokens and logits (``zoo.moe``'s kernel list counts the
    same)."""
    if N != E:
        raise ValueError(f"router_route's N is the experts ({E}), not {N}")
    h = rnd(M, K)
    wb = h.element_size()
    routers = [rnd(N, K) for _ in range(cold_copies(N * K * wb, cuda, cap=MOST_COPIES))]
    fns = [lambda wr=wr: moe_route.router_route(h, wr, k, False, tile[0], pdl=pdl)
           for wr in routers]
    flops = 2.0 * M * N * K
    nbytes = float(N * K * wb + M * (N + K) * wb)
    return entry("moe_gemm", tm(fns), op="router_route", M=M, E=E, k=k, N=N, K=K, dtype=dtype,
                 flops=flops, bytes=nbytes, touched=E)
