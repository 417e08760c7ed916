"""This device's measured ceilings (copy bandwidth, GEMM rates), cached: measured the first time
in a child process (``sweep.measure.ceilings``: no CUDA context in the caller) and kept in
``results/ceilings/<device>.json``.

Usage: ``python -m sweep.caches.ceiling_cache`` prints this device's hardware spec and its (measured or
cached) ceilings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..analysis.hardware import load_spec
from ..common.atomic import write_json
from ..common.env import WORK, slug

CEILINGS_DIR = WORK / "results" / "ceilings"


def measure_ceilings(device: dict, refresh: bool = False, timeout_s: float = 300,
                     cache_dir: Path | None = None, on_line=None,
                     again_if_contended: bool = True) -> dict:
    """Measured copy bandwidth (bytes/s) and GEMM rates (FLOP/s per dtype) of ``device``, cached.

    Measured the first time for a device in a child process (``sweep.measure.ceilings``: no CUDA
    context in the caller) and cached as ``<cache_dir>/<device>.json`` (default
    ``results/ceilings``); a GPU's cache from before the sustained GEMM rate and its slow-down at
    lower duties (``gemm_flops_bf16_sustained``, ``power_onset_s``, ``power_slowdown_by_duty``) is
    measured again. Measured while another
    job used the device (``sweep.measure.contention``: busy cores, another GPU process), they
    serve this study with ``contended_evidence`` and the cache is measured again next time (a
    busy CPU's copy rate read 9.4 GB/s against 37.5 idle, and every later study's MBU with it);
    ``again_if_contended=False`` takes them as cached (a study's worker: the study measured them
    once for all its workers). A measurement that fails falls back to such a cache.

    Returns:
        ``{"copy_bytes_s", "gemm_flops_<dtype>", ..., "env": {...}}`` (and
        ``contended_evidence``, as above); ``{"error": reason}`` if the
        measurement failed, so figures against it become NaN with that reason.
    """
    from ..common.locks import cache_lock
    from ..measure import ceilings, contention

    cache_dir = cache_dir or CEILINGS_DIR
    path = cache_dir / f"{slug(device['name'])}.json"
    say = on_line or (lambda m: print(m, flush=True))
    with cache_lock(path, f"the ceilings of {device['name']}", say):  # one measurement at a time
        have = None
        if path.exists() and not refresh:
            try:
                have = json.loads(path.read_text())
            except ValueError as e:  # a truncated or empty file: measured again, saying so
                say(f"ceilings: the cache {path} is unreadable ({e}): measured again")
                have = None
            if isinstance(have, dict) and have.get("contended_evidence") and again_if_contended:
                say(f"ceilings: the cached ones were measured while another job used the device "
                    f"({have['contended_evidence']}): measured again")
            elif isinstance(have, dict) and (device["type"] != "cuda"
                                                 or "power_slowdown_by_duty" in have):
                return have
        try:
            with contention.measuring(device, say) as use:  # holds the device's lock
                res = ceilings.run(device["type"], timeout_s, on_line=on_line)
        except RuntimeError as e:
            if isinstance(have, dict) and (have.get("contended_evidence")
                                           or "power_onset_s" in have):
                say(f"ceilings: measuring them again failed ({e}): the cached ones serve")
                return have  # (one from before the power limit's duties prices as it did)
            return {"error": str(e)}
        if use.get("contended"):  # kept for this study, with the evidence: measured again next
            res = dict(res, contended_evidence=use["contended_evidence"])
            say(f"ceilings: measured while another job used the device "
                f"({use['contended_evidence']}): used now, measured again next time")
        write_json(path, res)
        return res


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Print this device's hardware spec and its "
                                             "measured (or cached) ceilings.")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--refresh", action="store_true", help="measure again even if cached")
    a = ap.parse_args(argv)
    from ..common.env import detect_device

    dev = detect_device(a.device)
    spec = load_spec("auto", dev["name"])
    print(json.dumps({"device": dev["name"], "spec": spec.__dict__,
                      "ceilings": measure_ceilings(dev, refresh=a.refresh)}, indent=2,
                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
