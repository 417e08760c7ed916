"""The decode GEMV at 2-16 rows: which tile reaches the copy bandwidth, per shape (issue 34).

    python -m bench.gemv_probe time OUT.csv        # every shape x tile, the shipped choice, cuBLAS
    python -m bench.gemv_probe ncu OUT_DIR SHAPE:TILE...  # ncu on one call of each pair
    python -m bench.gemv_probe child SHAPE CFG     # one call, bracketed for ncu
    python -m bench.gemv_probe prefetch OUT.csv    # the seed tiles with / without PREFETCH_X

Each call is timed as the decode step meets it: after a read of 2.5x the L2 (the weights of the
other layers evict this one's), replayed in a CUDA graph (``kernels.graph_timing.time_ms``, cold).
Columns: ``us`` per call, ``gbs`` (``N*K*2`` weight bytes plus the activations, over the time),
``frac_copy`` (of the copy bandwidth measured here, ``sweep.measure.ceilings``' method: a 1 GiB
``copy_``, read + write counted). ``tile`` is ``BLOCK_N/BLOCK_K/SPLIT_K/warps/stages/W_AHEAD``;
``shipped`` the choice in ``kernels/tuned/``, ``cublas`` ``F.linear`` after the prologue's own
kernel (the cuBLAS path of ``kernels.decode_linear``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from bench.gpu import write_rows
from kernels import gemv as G
from kernels import switches
from kernels.graph_timing import time_ms
from sweep.measure.ceilings import copy_rate

# name, M, N, K, prologue: the main job's batch-8 projections (Llama-3.2-1B shape, n_kv_heads 1
# and 8) and the 8B's at batch 8
SHAPES = [("1b_qkv_g32", 8, 2176, 2048, "norm"), ("1b_qkv_g4", 8, 3072, 2048, "norm"),
          ("1b_out", 8, 2048, 2048, "none"), ("1b_w13", 8, 16384, 2048, "norm"),
          ("1b_w2", 8, 2048, 8192, "swiglu"), ("1b_head", 8, 128256, 2048, "norm"),
          ("8b_w13", 8, 28672, 4096, "norm"), ("8b_w2", 8, 4096, 14336, "swiglu"),
          ("8b_qkv", 8, 6144, 4096, "norm"), ("8b_out", 8, 4096, 4096, "none"),
          ("1b_w13_m2", 2, 16384, 2048, "norm"), ("1b_w13_m16", 16, 16384, 2048, "norm")]
TILES = sorted({(bn, bk, sk, w, st, wa)
                for bn, bk in ((32, 256), (64, 128), (64, 256), (128, 64), (128, 128))
                for sk in (1, 2, 4, 8) for w, st in ((4, 3), (4, 4), (8, 4), (4, 6))
                for wa in (0,) if bn * bk * 2 * st <= 160 * 1024}
               | {(64, 128, sk, 4, st, 1) for sk in (1, 4) for st in (1, 2)})
# phase A sweeps every tile without a prologue on these (the weight stream is the cost); phase B
# times each shape's real prologue with the best TOP tiles of its phase-A sibling
SWEEP = {"1b_qkv_g32", "1b_out", "1b_w13", "1b_w2", "8b_w13", "8b_w2"}
SIBLING = {"1b_qkv_g4": "1b_qkv_g32", "1b_head": "1b_w13", "8b_qkv": "1b_qkv_g32",
           "8b_out": "1b_out", "1b_w13_m2": "1b_w13", "1b_w13_m16": "1b_w13"}
TOP = 6


def tile_dict(t):
    bn, bk, sk, w, st, wa = t
    return {"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sk, "num_warps": w, "num_stages": st,
            "W_AHEAD": wa}


def inputs(M, N, K, prologue):
    dev = "cuda"
    torch.manual_seed(0)  # the same inputs for every tile: its error against cuBLAS is meaningful
    kin = 2 * K if prologue == "swiglu" else K
    x = torch.randn(M, kin, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
    nw = torch.ones(K, device=dev, dtype=torch.bfloat16)
    r = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    return x, w, nw, r


def call(M, N, K, prologue, cfg):
    """A zero-argument call of the GEMV with tile ``cfg`` (None: the shipped, autotuned choice;
    'cublas': the prologue's torch kernel then ``F.linear``)."""
    x, w, nw, r = inputs(M, N, K, prologue)
    kw = {}
    if prologue == "norm":
        kw = dict(norm_weight=nw, residual=r)
    if cfg == "cublas":  # the zoo's prologue numerics as torch kernels, then F.linear
        def run():
            out = G.reference(x, w, None, prologue, nw, 1e-5, r if prologue == "norm" else None)
            return out[0] if isinstance(out, tuple) else out
        return run, (x, w, nw, r)
    return (lambda: G.gemv(x, w, prologue=prologue, config=cfg, **kw)), (x, w, nw, r)


def copy_bytes_s() -> float:
    """The copy bandwidth (bytes/s, read + write counted), ``sweep.measure.ceilings``' method."""
    return copy_rate("cuda")["copy_bytes_s"]


def _time(name, M, N, K, prologue, label, cfg, bw, ref):
    kin = 2 * K if prologue == "swiglu" else K
    nbytes = N * K * 2 + M * (kin + N) * 2 + (2 * M * K * 2 if prologue == "norm" else 0)
    try:
        fn, args = call(M, N, K, prologue, cfg)
        y = fn()
        y = y[0] if isinstance(y, tuple) else y
        err = float((y.float() - ref).abs().max()) if ref is not None else float("nan")
        us = time_ms(fn, reps=20, cold=True) * 1e3
    except Exception as e:  # a tile that does not fit (shared memory) is skipped
        print(f"{name} {label}: {type(e).__name__}: {str(e)[:80]}", flush=True)
        return None, None
    gbs = nbytes / (us * 1e-6) / 1e9
    return dict(shape=name, M=M, N=N, K=K, prologue=prologue, tile=label, us=round(us, 3),
                gbs=round(gbs, 1), frac_copy=round(gbs * 1e9 / bw, 4),
                max_abs_err_vs_cublas=round(err, 5), copy_tbs=round(bw / 1e12, 4)), y


def time_all(out_csv: str) -> None:
    bw = copy_bytes_s()
    print(f"copy {bw / 1e12:.3f} TB/s, {len(TILES)} tiles", flush=True)
    rows, best = [], {}
    for phase in ("A", "B"):
        for name, M, N, K, prologue in SHAPES:
            if phase == "A" and name not in SWEEP:
                continue
            pro = "none" if phase == "A" else prologue
            cub, y = _time(name, M, N, K, pro, "cublas", "cublas", bw, None)
            ref = y.float()
            mine = [cub]
            if phase == "A":
                cands = [("/".join(map(str, t)), tile_dict(t)) for t in TILES]
            else:
                cands = [("shipped", None)] + [(t, tile_dict(tuple(int(v) for v in t.split("/"))))
                                               for t in best[SIBLING.get(name, name)]]
            for label, cfg in cands:
                r, _ = _time(name, M, N, K, pro, label, cfg, bw, ref)
                if r:
                    mine.append(r)
            for r in mine:
                r["phase"] = phase
            rows += mine
            ranked = sorted((r for r in mine if r["tile"] not in ("cublas", "shipped")),
                            key=lambda r: -r["frac_copy"])
            if phase == "A":
                best[name] = [r["tile"] for r in ranked[:TOP]]
            ship = next((r["frac_copy"] for r in mine if r["tile"] == "shipped"), None)
            print(f"{phase} {name} ({pro}): cublas {cub['frac_copy']} shipped {ship} best "
                  + ", ".join(f"{r['tile']} {r['frac_copy']}" for r in ranked[:3]), flush=True)
            write_rows(out_csv, rows)


def prefetch(out_csv: str) -> None:
    """The dot path's seed tiles (``kernels.gemv._SEEDS``) on every shape with its prologue, the
    next activation tiles loaded a step ahead (PREFETCH_X) or not, against cuBLAS's output."""
    bw = copy_bytes_s()
    rows = []
    for name, M, N, K, prologue in SHAPES:
        cub, y = _time(name, M, N, K, prologue, "cublas", "cublas", bw, None)
        rows.append(cub)
        line = []
        for seed in G._SEEDS:
            for px in (0, 1):
                cfg = {**seed, "PREFETCH_X": px}
                label = "/".join(str(cfg[k]) for k in ("BLOCK_N", "BLOCK_K", "SPLIT_K",
                                                       "num_warps", "num_stages")) + f"/px{px}"
                r, _ = _time(name, M, N, K, prologue, label, cfg, bw, y.float())
                if r:
                    rows.append(r)
                    line.append(f"{label} {r['us']}us {r['max_abs_err_vs_cublas']}")
        print(name, "|", ", ".join(line), flush=True)
        write_rows(out_csv, rows)


def child(shape: str, cfg: str) -> None:
    """One call of ``shape`` with tile ``cfg`` (``shipped`` or a ``tile`` string), for ncu."""
    name, M, N, K, prologue = next(s for s in SHAPES if s[0] == shape)
    c = None if cfg == "shipped" else tile_dict(tuple(int(v) for v in cfg.split("/")))
    fn, _ = call(M, N, K, prologue, c)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


# beside sweep.measure.ncu's detail set (time, DRAM bytes, occupancy, stalls per issue): the
# launch's shape and what limits its occupancy, and the stalls as shares of active warps
EXTRA = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "launch__grid_size",
         "launch__occupancy_limit_shared_mem", "launch__registers_per_thread",
         "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
         "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
         "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
         "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct")


def ncu(out_dir: str, pairs: list[str]) -> None:
    """ncu on one call of each ``SHAPE:TILE`` pair (``child``): ``<pair>.csv`` (ncu's raw page)
    per pair and ``ncu_summary.csv``, one row per kernel (``sweep.measure.ncu``'s columns and
    ``EXTRA``)."""
    from sweep.measure import ncu as N

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for p in pairs:
        shape, cfg = p.split(":")
        csv_path = out / f"{shape}_{cfg.replace('/', '-')}.csv"
        subprocess.run(N.command(csv_path, "detail", extra=EXTRA)
                       + [sys.executable, "-m", "bench.gemv_probe", "child", shape, cfg],
                       check=False, timeout=240)
        rows += [{"shape": shape, "tile": cfg, **r}
                 for r in N.parse_csv(csv_path.read_text(), EXTRA) if "gemv" in r["kernel"]]
        print(p, "kernels", len(rows), flush=True)
    write_rows(str(out / "ncu_summary.csv"), rows)

if __name__ == "__main__":
    switches.set_current(switches.Switches())
    if sys.argv[1] == "time":
        time_all(sys.argv[2])
    elif sys.argv[1] == "prefetch":
        prefetch(sys.argv[2])
    elif sys.argv[1] == "ncu":
        ncu(sys.argv[2], sys.argv[3:])
    else:
        child(sys.argv[2], sys.argv[3])
