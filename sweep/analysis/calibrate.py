"""Calibration: micro-benchmarks of the kernels the zoo launches, never of whole models.

``python -m sweep.calibrate [--refresh] [--quick]`` measures, on this device, in a child process:

- ``gemm``: ``F.linear`` (what ``nn.Linear`` runs) of ``[M, K] x [K, N]`` in the model dtype over
  ``M`` in powers of two (``M_GRID``, 1 .. 32768 on a GPU) and every ``(N, K)`` the shipped models and
  experiment spaces use (q/k/v, output, FFN gate+up and down, LM head), plus off-grid dims (odd
  multiples, non-multiples of 64) so the performance model can interpolate in log space;
- ``decode_attn``: one new token against a KV cache, torch (``zoo.gqa.grouped_decode_attention``)
  and Triton (``kernels.decode_attention``; bf16, int8, fp8 caches on a GPU), over batch, KV
  heads, group size, context and head_dim;
- ``prefill_attn``: causal ``scaled_dot_product_attention`` in the model's layouts (torch and
  Triton paths) over sequence length, head_dim and GQA group;
- ``elementwise``: RMSNorm (+ residual), RoPE, SwiGLU, the KV write and quantize-on-write, torch
  and Triton, by bytes moved;
- ``launch``: the fixed cost per kernel inside a CUDA graph and per op in eager mode.

On a GPU the kernels are timed as CUDA-graph replays of back-to-back launches (kernel time plus
the graph's gap, as a decode step runs them), median of repeats with min and p90 kept; GEMMs and
decode attention rotate through copies of their weights / KV cache spanning 2.5x the L2 (cold, as
each layer's are in a model; the elementwise kernels' inputs stay hot, as they come straight from
the previous kernel); on the CPU eagerly. Results: ``results/calibration/<device>.parquet`` (one
row per entry: ``kind``, its shape columns, ``time_s``, ``time_s_min``, ``time_s_p90``) and
``<device>.json`` (device, driver, versions, date, grid, wall time), cached like the ceilings and
measured on first use. On the CPU a reduced grid over the tiny shapes (``--quick``, what CI runs).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from ..atomic import write_atomic, write_json
from ..env import REPO, environment, slug
from . import microbench as mb
from .microbench import cold_copies, entry, timer

CAL_DIR = REPO / "results" / "calibration"
VERSION = 7  # of the grid and the table's columns: a cache of another version is measured again
# M of the GEMMs on a GPU: every power of two up to 64 (decode batches), then every other one up
# to 32768 (prefill tokens); the predictor interpolates in log M between them
M_GRID = [1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096, 16384, 32768]
OFF_GRID = [(1000, 1000), (1536, 2880), (2112, 1344), (5000, 3000), (4160, 4160)]  # not x64


def gemm_shapes(designs) -> list[tuple[int, int]]:
    """Every ``(N, K)`` of the GEMMs the zoo launches for ``designs`` (ModelConfigs): fused
    q/k/v, output, FFN gate+up, FFN down, LM head; sorted, without repeats."""
    out = set()
    for c in designs:
        n_in = 2 if c.ffn_type == "swiglu" else 1
        out |= {(c.q_dim + 2 * c.kv_dim, c.d_model), (c.d_model, c.q_dim),
                (n_in * c.ffn_dim, c.d_model), (c.d_model, c.ffn_dim), (c.vocab_size, c.d_model)}
    return sorted(out)


def run(designs, device: str, quick: bool = False, log=print) -> list[dict]:
    """Measure every calibration entry for ``designs`` on ``device`` (``cuda`` or ``cpu``);
    returns the rows. ``quick`` is the reduced grid (the CPU's, and CI's)."""
    import torch

    cuda = device == "cuda"
    dtype = "bf16" if cuda else "fp32"
    tdt = torch.bfloat16 if cuda else torch.float32
    tm = timer(cuda, 7 if cuda else 5)
    rows = []
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape, dt=tdt):
        return torch.randn(*shape, device=device, dtype=dt, generator=g)

    t0 = time.time()
    # Order matters on a GPU: small kernels first, before any compute-bound benchmark idles the
    # GPU between its repeats (duty cycle) and its clocks drop
    rows += mb.launch(device, tm)  # first: the host costs before the heap has grown
    rows += mb.elementwise(device, tm, rnd, quick)
    rows += mb.decode_attention(device, tm, rnd, quick, dtype)
    log(f"calibrate: launch, elementwise, decode attention ({time.time() - t0:.0f} s)")
    # GEMMs: every (N, K) of the designs and some off the 64-grid, M in powers of two; the
    # memory-bound M (< 1024) of every shape, then the compute-bound ones
    shapes = gemm_shapes(designs) + ([] if quick else OFF_GRID)
    m_max = 32768 if cuda else 512
    m_grid = M_GRID if cuda else [2**e for e in range(int(math.log2(m_max)) + 1)]
    rows += gemms(shapes, m_grid, cuda, tm, rnd, dtype)
    log(f"calibrate: {len(shapes)} GEMM shapes ({time.time() - t0:.0f} s)")
    rows += mb.prefill_attention(device, tm, rnd, quick)
    log(f"calibrate: prefill attention ({time.time() - t0:.0f} s)")
    rows += mb.graph_gap(device)  # last: it runs torch.profiler
    return rows


def gemms(shapes, m_grid, cuda: bool, tm, rnd, dtype: str) -> list[dict]:
    """``gemm`` entries: ``F.linear`` of ``[M, K] x [K, N]`` for every ``(N, K)`` in ``shapes`` and
    ``M`` in ``m_grid`` (inputs bounded in size), weights rotated cold; the memory-bound M (< 1024)
    of every shape first, then the compute-bound ones at a duty cycle (``microbench.timer``)."""
    import torch.nn.functional as F

    rows = []
    for big in (False, True):
        for N, K in shapes:
            ms = [M for M in m_grid if (M >= 1024) == big
                  and M * max(N, K) * 2 <= (2**31 if cuda else 2**26)]  # bounded input size
            if not ms:
                continue
            # weights read from DRAM on every call, as each layer's are in a model
            ws = [rnd(N, K) for _ in range(cold_copies(N * K * (2 if cuda else 4), cuda))]
            for M in ms:
                x = rnd(M, K)
                sp = tm([lambda x=x, w=w: F.linear(x, w) for w in ws],
                        n=2 if M * N * K > 2**36 else 8, duty=big)
                rows.append(entry("gemm", sp, M=M, N=N, K=K, dtype=dtype,
                                  flops=2.0 * M * N * K))
            del ws
    return rows


def bench_gemms(shapes, m_values, device: str) -> list[dict]:
    """``gemm`` entries for ``shapes`` at exactly ``m_values``, measured now in this process as
    ``run`` measures them (the advisor's shapes missing from a calibration)."""
    import torch

    cuda = device == "cuda"
    dtype, tdt = ("bf16", torch.bfloat16) if cuda else ("fp32", torch.float32)
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, device=device, dtype=tdt, generator=g)

    return gemms(shapes, sorted(set(m_values)), cuda, timer(cuda, 7 if cuda else 5), rnd, dtype)


# ---- the cache ---------------------------------------------------------------------------

def paths(device_name: str) -> tuple[Path, Path]:
    """``(<device>.json, <device>.parquet)`` in ``results/calibration``."""
    base = CAL_DIR / slug(device_name)
    return base.with_suffix(".json"), base.with_suffix(".parquet")


def load(device_name: str, where: Path | None = None):
    """``(meta, table)`` of a cached calibration of ``device_name`` (or of the files at
    ``where``, a ``.json`` path), or None."""
    import pandas as pd

    meta_p, tab_p = (where, where.with_suffix(".parquet")) if where else paths(device_name)
    if not meta_p.exists() or not tab_p.exists():
        return None
    return json.loads(meta_p.read_text()), pd.read_parquet(tab_p)


def calibrate(device: dict, designs, refresh: bool = False, quick: bool | None = None,
              ceilings: dict | None = None, timeout_s: float = 900):
    """The device's calibration: cached in ``results/calibration/<device>.{json,parquet}``, else
    measured in a child process (``python -m sweep.analysis.calibrate --child``) over the GEMM
    shapes of ``designs``; ``ceilings`` (the device's measured ones) are kept in the meta, for a
    transfer to another device (``predict.transfer``). Returns ``(meta, table)``.

    Raises:
        RuntimeError: the measurement failed (the child's error tail in the message).
    """
    if not refresh and (have := load(device["name"])) is not None and \
            have[0].get("version") == VERSION:
        return have
    quick = device["type"] != "cuda" if quick is None else quick
    CAL_DIR.mkdir(parents=True, exist_ok=True)
    spec = CAL_DIR / f".{slug(device['name'])}.designs.json"
    write_json(spec, {"designs": [c.to_dict() for c in designs], "quick": quick,
                      "device": device["type"]})
    meta_p, tab_p = paths(device["name"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO),
                                                                    os.environ.get("PYTHONPATH")])))
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "sweep.analysis.calibrate", "--child", str(spec),
                        str(tab_p)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=timeout_s)
    if r.returncode != 0 or not tab_p.exists():
        raise RuntimeError(f"calibration failed: {(r.stderr or r.stdout).strip()[-800:]}")
    import pandas as pd

    table = pd.read_parquet(tab_p)
    meta = {"device": device["name"], "driver": device.get("driver"), **environment(device),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "quick": quick,
            "version": VERSION,
            "entries": len(table), "wall_s": round(time.time() - t0, 1),
            "kinds": table.kind.value_counts().to_dict(), "log": r.stdout[-2000:],
            "ceilings": {k: v for k, v in (ceilings or {}).items()
                         if k in ("copy_bytes_s", "gemm_flops_bf16", "gemm_flops_fp16",
                                  "gemm_flops_fp32")}}
    write_json(meta_p, meta)
    return meta, table


def _child(spec_path: str, out_path: str) -> int:
    import pandas as pd

    from zoo import ModelConfig

    spec = json.loads(Path(spec_path).read_text())
    designs = [ModelConfig.from_dict(d) for d in spec["designs"]]
    rows = run(designs, spec["device"], spec["quick"], log=lambda m: print(m, flush=True))
    write_atomic(Path(out_path), lambda p: pd.DataFrame(rows).to_parquet(p, index=False))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(_child(sys.argv[2], sys.argv[3]))
    print("usage: python -m sweep.calibrate [--refresh] [--quick] (this module's --child is "
          "internal)", file=sys.stderr)
    sys.exit(2)
