"""Prices of kernels with no calibration entry of their own yet, from a like entry, each noted
in the prediction (``Calibrated.notes``): the mixture-of-experts layer's (``zoo.moe``) until its
kernels have entries of their own.

- ``router``: the router's softmax, top-k and the device-side sort by expert, small torch ops on
  a few rows: each launch as the graph's tiny kernel (``graph_kernel``).
- ``moe_gather`` / ``moe_combine`` (the torch path's gather of an expert's tokens and its
  weighted add into them): the ``embedding`` gather's and the ``residual`` add's entries, per
  launch.
- a grouped GEMM over the touched experts (``kernels.moe``; ``shape["experts"]``): that many
  cuBLAS GEMMs of the tokens per expert (``Calibrated.gemm``).
"""

from __future__ import annotations

# op -> (the like entry, its launches, what it stands for)
PROXIES = {"router": ("graph_kernel", 1, "the MoE router's softmax / top-k / sort"),
           "moe_gather": ("embedding", 1, "the MoE tokens' gather"),
           "moe_combine": ("residual", 1, "the MoE experts' weighted combine")}


def proxy_price(cal, k) -> tuple[float, str]:
    """``(time s, basis)`` of one launch of kernel ``k`` (a ``zoo.launches.Kernel``) priced by
    ``cal`` (a ``pricing.Calibrated``) from a like entry (module doc).

    Raises:
        KeyError: ``k`` is none of the kernels priced so.
    """
    if k.kind == "gemm":
        n = k.shape["experts"]
        t, b = cal.gemm(k.shape)
        cal._note("the MoE grouped GEMMs not calibrated: priced as one cuBLAS GEMM per touched "
                  "expert")
        return t * n, f"{b} x {n} experts (as cuBLAS GEMMs)"
    op = k.shape["op"]
    if op not in PROXIES:
        raise KeyError(f"no elementwise {op}/{k.shape['impl']} in the calibration")
    like, n, what = PROXIES[op]
    cal._note(f"{what} not calibrated: priced as the {like} entry, per launch")
    if like == "graph_kernel":
        return k.launches * cal.launch(like), f"launch {like} x {k.launches} (as {what})"
    t, b = cal.linear("elementwise", {"op": like, "impl": "torch"}, k.bytes)
    return t * k.launches / n, f"{b} (as {what})"
