"""Prices of kernels with no calibration entry of their own yet, from a like entry, each noted
in the prediction (``Calibrated.notes``): the mixture-of-experts layer's (``zoo.moe``) until its
kernels have entries of their own.

- ``router``: the router's softmax, top-k and the device-side sort by expert, small torch ops on
  a few rows: each launch as the graph's tiny kernel (``graph_kernel``; a calibration with no
  CUDA graph, the CPU's: a tiny op issued eagerly, ``eager_op``); ``route_align`` (the three in
  one Triton kernel) the same, one launch.
- ``route_rows`` and ``moe_align`` (``kernels.moe_align``: a long prompt's rows routed in one
  launch, its slots sorted by expert in two), ``route_draw`` (``moe_align.draw_logits``: a
  routing skew's draw before ``route_align``): each launch as the graph's tiny kernel.
- ``moe_sum``: the sum of each token's ``k`` expert outputs, as the ``residual`` add's entry.
- ``argmax`` (a decode step's greedy sample inside its graph, ``zoo.generate.decode_greedy``): in
  a calibration from before it had entries of its own, as the ``sample`` entry of the same rows
  (torch's clone and argmax: an upper bound).
- ``moe_gather`` / ``moe_combine`` (the torch path's gather of an expert's tokens and its
  weighted add into them): the ``embedding`` gather's and the ``residual`` add's entries, per
  launch.
- a grouped GEMM over the touched experts (``kernels.moe_gemm``; ``shape["experts"]``): one launch
  that streams their weights, priced as one GEMM over their rows stacked (``N`` times the
  experts), by the decode GEMV's entries for at most 16 tokens per expert, else the GEMMs'.
- an fp16 design's kernels, where the calibration holds no fp16 entry, as their bf16 twins
  (``half_twin``).
- ``router_route`` (``kernels.moe_route``: the router's GEMM, softmax, top-k and sort in one
  launch): as the two launches it replaces, the router's GEMM (cuBLAS's entry, as the two-launch
  path's ``router`` kernel) and ``route_align`` (on an H200 the one launch took 1.7-2.9 us less,
  ``results/reference/moe_h100.md``).
"""

from __future__ import annotations

from dataclasses import replace

from zoo.formats import DTYPE_BYTES
from zoo.moe import route_bytes

# op -> (the like entry, its launches, what it stands for, its bytes per the op's)
PROXIES = {"router": ("graph_kernel", 1, "the MoE router's softmax / top-k / sort", 1),
           "route_align": ("graph_kernel", 1, "the MoE router's fused softmax / top-k / sort", 1),
           "moe_sum": ("residual", 1, "the MoE slots' sum", 1),
           "moe_align": ("graph_kernel", 1, "the MoE slots' counting sort", 1),
           "route_rows": ("graph_kernel", 1, "the MoE router's softmax / top-k over the rows", 1),
           "route_draw": ("graph_kernel", 1, "the MoE routing draw before route_align", 1),
           "moe_gather": ("embedding", 1, "the MoE tokens' gather", 1),
           "moe_combine": ("residual", 1, "the MoE experts' weighted combine", 1),
           "argmax": ("sample", 1, "the decode step's greedy argmax", 3)}


def proxy_price(cal, k) -> tuple[float, str]:
    """``(time s, basis)`` of one launch of kernel ``k`` (a ``zoo.launches.Kernel``) priced by
    ``cal`` (a ``pricing.Calibrated``) from a like entry (module doc).

    Raises:
        KeyError: ``k`` is none of the kernels priced so.
    """
    if k.kind == "gemm" and k.op == "router_route":  # the router's GEMM as the two launches
        s = k.shape  # price it (cuBLAS's entry: zoo.moe's ``router`` kernel), + the routing
        plain = {c: s[c] for c in ("M", "N", "K", "dtype", "weight_bits") if c in s}
        t, b = cal.quantized(plain, *cal.gemm(plain))
        nb = route_bytes(s["tokens"], s["E"], s["topk"], s["K"], DTYPE_BYTES[s["dtype"]])
        ra = replace(k, module="norms_elementwise", kind="elementwise", op="route_align",
                     flops=0, bytes=nb, shape={"op": "route_align", "impl": "triton",
                                               "bytes": nb}, launches=1)
        t2, b2 = cal.price(ra)
        cal._note("the MoE router in one launch (router_route) not calibrated: priced as the "
                  "router's GEMM and route_align")
        return t + t2, f"{b} + {b2} (as router_route)"
    if k.kind == "gemm":  # one launch streaming the touched experts' weights: as one GEMM
        n = k.shape["experts"]  # over their rows stacked (the decode GEMV's entry for few rows)
        s = {key: v for key, v in k.shape.items() if key != "experts"}
        s["N"] *= n
        cal._note("the MoE grouped GEMMs not calibrated: priced as one GEMM over the touched "
                  "experts' rows stacked")
        t, b = cal.gemv(dict(s, prologue="none")) if s["M"] <= 16 else cal.gemm(s)
        return cal.quantized(s, t, f"{b} ({n} experts' rows stacked)")
    op = k.shape["op"]
    if op not in PROXIES:
        raise KeyError(f"no elementwise {op}/{k.shape['impl']} in the calibration")
    like, n, what, per = PROXIES[op]
    if like == "graph_kernel":
        try:
            one = cal.launch(like)
        except KeyError:  # a calibration with no CUDA graph (the CPU's): a tiny op eagerly
            like, one = "eager_op", cal.launch("eager_op")
        t, b = k.launches * one, f"launch {like} x {k.launches} (as {what})"
    else:
        t, b = cal.linear("elementwise", {"op": like, "impl": "torch"}, per * k.bytes)
        t, b = t * k.launches / n, f"{b} (as {what})"
    cal._note(f"{what} not calibrated: priced as the {like} entry, per launch")
    return t, b


def half_twin(cal, k):
    """A kernel of an fp16 design (``k``'s ``dtype`` or ``kv_dtype``) as the same kernel in
    bf16, where ``cal`` (a ``pricing.Calibrated``) holds no fp16 entry at all (the shipped grid
    measures bf16); None otherwise. The two formats have the same bytes and the same tensor-core
    rate on the GPUs the calibrations are shipped for (H100 SXM5: 989 TFLOP/s dense FP16 and
    BF16, H200 the same; NVIDIA H100 / H200 datasheets), so the bf16 entry stands in, noted."""
    s = k.shape
    if "fp16" not in (s.get("dtype"), s.get("kv_dtype")):
        return None
    if "has_fp16" not in cal._fits:  # the table's answer, read once (its kernels are many)
        cal._fits["has_fp16"] = bool((cal.t.dtype == "fp16").any() or (cal.t.kv_dtype == "fp16").any())
    if cal._fits["has_fp16"]:
        return None
    cal._note("fp16 kernels priced by the calibration's bf16 entries (the same bytes and "
              "tensor-core rate on Hopper)")
    return replace(k, shape={c: "bf16" if c in ("dtype", "kv_dtype") and v == "fp16" else v
                             for c, v in s.items()})
