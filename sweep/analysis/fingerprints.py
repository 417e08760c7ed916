"""Which code and versions a calibration family's entries were measured under: their
fingerprints, and which families of a calibration no longer match.

Every entry of a calibration (``sweep.caches.calibration``) belongs to a family (``gemm``,
``gemv``, ``decode_attn/triton``, ...); the meta records each family's fingerprint when it was
measured: the code of the kernels and zoo modules its time depends on (``kernels.tuning``'s
``module_code``: comments and docstrings left out), the switches that change what they launch or
how they are tuned, the device, driver, torch, CUDA and Triton, and for the fixed costs
(``launch``) the host. A family whose fingerprint differs is stale: measured under other code.
"""

from __future__ import annotations

import json
import platform

from kernels.tuning import fingerprint

from ..common.env import REPO, triton_interpret, versions

_KERNELS = REPO / "kernels"
_FIXED_COSTS = REPO / "sweep" / "measure" / "fixed_costs.py"  # the launch group's own code
_MICROBENCH = REPO / "sweep" / "measure" / "microbench.py"  # the elementwise group's
_MICROBENCH_MOE = REPO / "sweep" / "measure" / "microbench_moe.py"
_MICROBENCH_MLA = REPO / "sweep" / "measure" / "microbench_mla.py"
_ZOO = REPO / "zoo"


def family(kind: str, impl=None, band: bool = False) -> str:
    """The fingerprint family of an entry: ``decode_attn`` and ``elementwise`` by implementation
    (``decode_attn/triton``), a local or sink layer's prefill attention (``band``) apart from
    SDPA's (``prefill_attn/band``), the others by kind."""
    if kind in ("decode_attn", "elementwise") and isinstance(impl, str):
        return f"{kind}/{impl}"
    return "prefill_attn/band" if kind == "prefill_attn" and band else kind


def fingerprints(device: dict, switches, measured: tuple | None = None) -> dict:
    """The current fingerprint of every family on ``device`` under ``switches`` (a
    ``kernels.switches.Switches``): what its entries' times depend on (the module's text).
    ``measured``: ``(versions, host, triton_interpret)`` to take in place of this process's
    (``code_stale``: a calibration's own)."""
    v, host, interpret = measured or (versions(), platform.node(), triton_interpret())
    base = (device.get("name"), device.get("driver"), v["torch"], v.get("cuda"))
    if interpret:  # only when set: the shipped files' fingerprints stay as they are
        base += ("triton_interpret",)
    tri = v.get("triton")
    sw = switches.to_dict()
    tune = (sw["autotune"], sw["cold_tune"])

    def k(*names):
        return tuple(str(_KERNELS / f"{n}.py") for n in names)

    every_kernel = k("decode_attention", "split_merge", "gemv", "decode_linear", "graph_timing",
                     "rmsnorm", "rope", "swiglu", "kv_quant", "argmax", "qk_norm", "moe_route",
                     "moe_align")
    zoo = tuple(str(_ZOO / f"{n}.py") for n in ("model", "attention", "generate", "cache", "gqa",
                                                 "norms", "experts")) + k("moe_gemm")
    return {
        "gemm": fingerprint(*base),
        "prefill_attn": fingerprint(*base),
        "prefill_attn/band": fingerprint(*base, tri, modules=k("prefill_attention")
                                         + (str(_ZOO / "gqa.py"),)),
        "decode_attn/torch": fingerprint(*base, modules=(str(_ZOO / "gqa.py"),)),
        "decode_attn/triton": fingerprint(*base, tri, *tune, sw["pdl"],
                                          modules=k("decode_attention", "split_merge", "rope",
                                                    "graph_timing")),
        "decode_attn/mla": fingerprint(*base, tri, modules=k("mla_decode", "split_merge",
                                                             "graph_timing")
                                       + (str(_MICROBENCH_MLA),)),
        "moe_gemm": fingerprint(*base, tri, modules=k("moe_gemm", "moe_route", "moe_align",
                                                      "split_merge")
                                + (str(_MICROBENCH_MOE),)),
        "gemv": fingerprint(*base, tri, *tune, sw["gemv_prefetch"], sw["gemv_w_ahead"], sw["pdl"],
                            modules=k("gemv", "decode_linear", "graph_timing", "rmsnorm",
                                      "swiglu")),
        "elementwise/torch": fingerprint(*base, modules=k("rmsnorm", "rope", "swiglu",
                                                          "kv_quant") + (str(_MICROBENCH),)),
        "elementwise/triton": fingerprint(*base, tri, modules=k("rmsnorm", "rope", "swiglu",
                                                                "kv_quant", "moe_gemm", "moe_align",
                                                                "argmax")
                                          + (str(_MICROBENCH),)),
        # the host's own costs: another machine's CPU issues ops at another rate (the eager
        # decode of one design read 2.3x the shipped H100's per-layer cost on an H200 host)
        "launch": fingerprint(*base, tri, json.dumps(sw, sort_keys=True), host,
                              modules=every_kernel + zoo + (str(_FIXED_COSTS),)),
    }


def stale_families(meta: dict, current: dict) -> list[str]:
    """The families whose recorded fingerprint differs from ``current`` (``fingerprints``); every
    family of a calibration without fingerprints (measured before they were kept)."""
    have = meta.get("fingerprints") or {}
    return sorted(f for f in current if f in have and have[f] != current[f]) if have else \
        sorted(current)


def code_stale(meta: dict) -> list[str]:
    """The families of a calibration (its ``meta``) measured under other code than the tree's:
    fingerprints recomputed with the meta's own device, driver, versions and host under the
    default switches, so only a change of code shows (a shipped calibration priced on another
    machine: its kernels changed after it was shipped). [] for a meta without fingerprints."""
    from kernels.switches import Switches

    if not meta.get("fingerprints"):
        return []
    v = {k: meta.get(k) for k in ("torch", "cuda", "triton")}
    current = fingerprints({"name": meta.get("device"), "driver": meta.get("driver")},
                           Switches(), measured=(v, meta.get("host"),
                                                 bool(meta.get("triton_interpret"))))
    return stale_families(meta, current)
