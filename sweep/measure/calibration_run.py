"""The calibration's measuring child: ``python -m sweep.measure.calibration_run SPEC.json OUT.parquet``.

Measures exactly the entries a spec asks for (``sweep.caches.calibration`` decides which: the
ones a study's designs need and its cache lacks) with the micro-benchmarks of
``sweep.measure.microbench``, and writes them as one table. Spec (JSON)::

    {"device": "cuda"|"cpu", "quick": bool, "switches": {...}, "tuning_dir": path|null,
     "base": ["launch", "elementwise"],          # whole groups (fixed costs, by-bytes kernels;
                                                 # "graph_gap": the launch group's last entry)
     "gemm": [[M, N, K], ...], "gemv": [[M, N, K, prologue], ...],
     "decode_attn": [{impl, kv_dtype, B, Hkv, G, S, D}, ...],
     "prefill_attn": [{impl, T, D, G, BH}, ...],
     "moe_gemm": [{op, M, E, k, N, K, dtype}, ...]}  # sweep.measure.microbench_moe

On a GPU the order matters: small kernels first, before any compute-bound benchmark idles the GPU
between its repeats (duty cycle) and its clocks drop; the launch costs first of all (the host's
costs before the heap has grown), the graph gap last (it runs torch.profiler, after which small
kernels time slower). Progress markers (``@progress``) on stdout for the parent's display.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..common.atomic import write_atomic
from . import fixed_costs
from . import microbench as mb
from .child import ChildTimeout, launch, log_tail, progress_line
from .microbench_mla import mla_decode
from .microbench_moe import moe_gemms

CHUNK = 16  # shapes measured between two saves of what a run has so far (``measure``)


def measure(spec: dict, log=print, partial=None) -> list[dict]:
    """The rows of every entry ``spec`` asks for (see the module's text), measured now in this
    process; ``partial(rows)`` is called after each group, and within a group of shapes after
    every ``CHUNK`` of them, with the rows so far (a killed run keeps them: the 206 decode
    attention shapes of an H100 recalibration take ~800 s, longer than one device call)."""
    import torch

    from kernels import switches

    device = spec["device"]
    cuda = device == "cuda"
    dtype = "bf16" if cuda else "fp32"
    tdt = torch.bfloat16 if cuda else torch.float32
    tm = mb.timer(cuda, 7 if cuda else 5)
    g = torch.Generator(device=device).manual_seed(0)
    switches.set_current(switches.Switches.from_dict(spec.get("switches")))

    def rnd(*shape, dt=tdt):
        return torch.randn(*shape, device=device, dtype=dt, generator=g)

    t0 = time.time()
    rows = []
    base = set(spec.get("base", []))

    def listed(what, key, fn, tup=False):  # a list of shapes in chunks, each kept when measured
        items = [tuple(x) if tup else x for x in spec.get(key, [])]
        got = []
        for i in range(0, len(items), CHUNK):
            got += fn(items[i:i + CHUNK], lambda done, total, i=i: progress_line(
                "progress", what, i + done, len(items)))
            if partial and i + CHUNK < len(items):
                partial(rows + got)
        return got

    steps = [("launch costs", lambda: fixed_costs.launch(device, tm) if "launch" in base else []),
             ("elementwise kernels", lambda: mb.elementwise(device, tm, rnd, spec.get("quick"))
              if "elementwise" in base else []),
             ("decode attention", lambda: listed("decode attention", "decode_attn", lambda xs, cb:
                                                 mb.decode_attention(device, tm, rnd, [
                                                     x for x in xs if x["impl"] != "mla"], cb)
                                                 + mla_decode(device, tm, rnd, [
                                                     x for x in xs if x["impl"] == "mla"]))),
             ("decode GEMV", lambda: listed("decode GEMV", "gemv", lambda xs, cb: mb.gemvs(
                 xs, cuda, tm, rnd, dtype, cb), tup=True)),
             ("MoE grouped GEMMs", lambda: listed("MoE grouped GEMMs", "moe_gemm",
                                                  lambda xs, cb: moe_gemms(device, tm, rnd, xs,
                                                                           cb))),
             ("GEMMs", lambda: listed("GEMMs", "gemm", lambda xs, cb: mb.gemms(
                 xs, cuda, tm, rnd, dtype, cb), tup=True)),
             ("prefill attention", lambda: listed("prefill attention", "prefill_attn",
                                                  lambda xs, cb: mb.prefill_attention(
                                                      device, tm, rnd, xs, cb))),
             ("graph gap", lambda: fixed_costs.graph_gap(device)
              if base & {"launch", "graph_gap"} else [])]
    for name, fn in steps:
        progress_line("phase", f"calibrating: {name}")
        got = fn()
        rows += got
        if got:
            log(f"calibrate: {name}: {len(got)} entries ({time.time() - t0:.0f} s)")
            if partial:
                partial(rows)
    if cuda and spec.get("tuning_dir"):
        from kernels import tuning

        tuning.save()
    return rows


def run(spec: dict, out_path: Path, timeout_s: float = 900.0, on_line=None,
        keep_log: Path | None = None) -> tuple[int, str]:
    """Measure ``spec`` in a child process (``sweep.measure.child.launch``) into ``out_path``
    (parquet; a child that ends early leaves the groups it finished in ``<out_path>.partial``).
    Returns ``(exit code, the child's log tail)``. A child that succeeded leaves no spec beside
    ``out_path``, and its log moved to ``keep_log`` where given (a failed one's are kept there).

    Raises:
        ChildTimeout: the child ran past ``timeout_s`` (s) and was killed.
    """
    from ..common.atomic import write_json

    spec_path = out_path.with_name(out_path.name + ".spec.json")
    log_path = out_path.with_name(out_path.name + ".log")
    write_json(spec_path, spec)
    out_path.unlink(missing_ok=True)
    out_path.with_name(out_path.name + ".partial").unlink(missing_ok=True)
    try:
        rc = launch([sys.executable, "-m", "sweep.measure.calibration_run", str(spec_path),
                     str(out_path)], log_path, timeout_s, on_line=on_line)
    except KeyboardInterrupt:  # the study stopped (Ctrl-C, SIGTERM): nothing of this run is kept
        for p in (spec_path, log_path, out_path, out_path.with_name(out_path.name + ".partial")):
            p.unlink(missing_ok=True)
        raise
    tail = log_tail(log_path, 800)
    if rc == 0:
        spec_path.unlink(missing_ok=True)
        if keep_log is not None:
            os.replace(log_path, keep_log)
    return rc, tail


def measure_in_child(spec: dict, what: str, timeout_s: float = 300.0):
    """The rows of ``spec`` measured now in a child (``run``), kept nowhere (a temporary
    folder): a DataFrame.

    Raises:
        RuntimeError: the child failed or timed out (``what`` and its error tail in the message).
    """
    import tempfile

    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="designzoo-measure-") as d:
        out = Path(d) / "entries.parquet"
        try:
            rc, tail = run(spec, out, timeout_s)
        except ChildTimeout as e:
            raise RuntimeError(f"{what} {e}") from None
        if rc != 0 or not out.exists():
            raise RuntimeError(f"{what} failed: {tail}")
        return pd.read_parquet(out)


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m sweep.measure.calibration_run SPEC.json OUT.parquet (internal: "
              "python -m sweep.cli.calibrate measures a calibration)", file=sys.stderr)
        return 2
    from .parent import watch_parent

    watch_parent()
    spec = json.loads(Path(argv[0]).read_text())
    if spec.get("tuning_dir"):
        from kernels import tuning

        tuning.configure(spec["tuning_dir"])
    out = Path(argv[1])
    partial = out.with_name(out.name + ".partial")

    def keep(rows):  # what is measured so far, and the tile choices, for a run cut off
        write_atomic(partial, lambda p: pd.DataFrame(rows).to_parquet(p, index=False))
        if spec.get("tuning_dir"):
            from kernels import tuning

            tuning.save()

    rows = measure(spec, log=lambda m: print(m, flush=True), partial=keep)
    write_atomic(out, lambda p: pd.DataFrame(rows).to_parquet(p, index=False))
    partial.unlink(missing_ok=True)
    return 0


__all__ = ["ChildTimeout", "measure", "run"]

if __name__ == "__main__":
    sys.exit(main())
