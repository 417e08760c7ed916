"""Decode attention per group size: the split plan and the merge, timed as the decode step runs them.

    python -m bench.attention_probe time OUT.csv              # every shape x variant (GPU)
    python -m bench.attention_probe levers OUT.csv [variant...]  # 16-bit partials, PDL, plan
    python -m bench.attention_probe ncu OUT_DIR [variant...]  # ncu on G = 1, 4, 32 (flagship)
    python -m bench.attention_probe child VARIANT HKV         # one call, bracketed for ncu

Each shape is timed the way a decode step meets it: RoPE and the cache write folded in
(``new_kv``), one call per layer over ``L`` separate caches (enough layers that their KV exceeds
2.5x the L2, at most 64), replayed in a CUDA graph of 3 rounds; medians of 5 replays. A variant
sets ``kernels.decode_attention``'s split plan (``PER_SM``), its in-kernel merge tile
(``MERGE_BUDGET``; 0: one head at a time, the kernel before this probe) and whether the merge is
folded into the launch (``fold``) or a kernel of its own; the ``levers`` variants also whether
the partials are 16-bit (``PARTIALS_16``) and the call's kernels launched with PDL (the merge
kernel too, ``MERGE_PDL``), as the model calls it. Tiles are the fixed config
(``switches.autotune=False``): the variants differ only in plan and merge.

Columns: ``us`` per call, ``gbs`` (the KV bytes of ``kernels.decode_attention``'s minimum over
the time), ``frac_copy`` (of ``sweep.measure.ceilings``' copy bandwidth, measured here).
"""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from bench.gpu import write_rows
from kernels import decode_attention as da
from kernels import kv_quant, switches
from kernels.split_merge import fold_pays

# name, B, H, Hkv, D, capacity, kv_dtype: the main job's six designs (batch 8, prompt 4096 + 64
# new tokens), the batch-1 Llama shapes, odd groups, head_dim 256, MQA with 64 heads, KV formats
SHAPES = [(f"flagship_g{32 // h}", 8, 32, h, 64, 4160, "bf16") for h in (1, 2, 4, 8, 16, 32)] + [
    ("1b_b1", 1, 32, 8, 64, 640, "bf16"), ("8b_b1", 1, 32, 8, 128, 640, "bf16"),
    ("8b_b8", 8, 32, 8, 128, 640, "bf16"), ("g5_25x5_d128", 8, 25, 5, 128, 4160, "bf16"),
    ("d256_g4", 8, 16, 4, 256, 4160, "bf16"), ("mqa64_d128_b1", 1, 64, 1, 128, 8192, "bf16"),
    ("flagship_g32_int8", 8, 32, 1, 64, 4160, "int8"),
    ("flagship_g32_fp8", 8, 32, 1, 64, 4160, "fp8_e4m3"),
    ("flagship_g4_int8", 8, 32, 8, 64, 4160, "int8"),
    ("b64_8k_bf16", 64, 32, 8, 64, 8256, "bf16"), ("b64_8k_int8", 64, 32, 8, 64, 8256, "int8"),
    ("b64_8k_fp8", 64, 32, 8, 64, 8256, "fp8_e4m3")]
# name: (fold, PER_SM, MERGE_BUDGET)
VARIANTS = {"before": (True, 4, 0), "fold_vec": (True, 4, 8192), "fold_vec16k": (True, 4, 16384),
            "kernel": (False, 4, 0), "fold_vec_sm2": (True, 2, 8192),
            "fold_vec_sm1": (True, 1, 8192), "fold_vec_sm8": (True, 8, 8192),
            "kernel_sm2": (False, 2, 0), "kernel_sm8": (False, 8, 0)}
# name: (PER_SM, PARTIALS_16, pdl, MERGE_PDL); the merge folded where ``plan`` says (the shipped
# rule). ``f32_pdl_split``: the kernels as the model ran them before the merge took PDL.
LEVERS = {"f32": (2, False, False, False), "f32_pdl_split": (2, False, True, False),
          "f32_pdl": (2, False, True, True), "p16": (2, True, False, False),
          "p16_pdl": (2, True, True, True), "p16_pdl_sm1": (1, True, True, True),
          "p16_pdl_sm05": (0.5, True, True, True), "p16_pdl_sm4": (4, True, True, True)}
# name: the shortest split (positions) the plan may cut, the shipped levers otherwise (merge
# under PDL, float32 partials): fewer, longer splits where batch x KV heads is small (a short
# context at batch 1 cut into 128-position splits spends its time on the merge's latency)
MIN_SPLIT = {"split256": 256, "split512": 512, "split1024": 1024, "split_whole": 1 << 30}
LEVERS.update({name: (2, False, True, True) for name in MIN_SPLIT})
LEVER_SHAPES = ("flagship_g32", "flagship_g16", "flagship_g8", "flagship_g4", "flagship_g1",
                "1b_b1", "8b_b1", "8b_b8", "g5_25x5_d128", "mqa64_d128_b1", "flagship_g32_int8",
                "b64_8k_bf16")
FULL = ("before", "fold_vec", "kernel")  # on every shape; the rest on the marked ones
SWEPT = {"flagship_g1", "flagship_g4", "flagship_g32", "1b_b1", "8b_b1", "b64_8k_bf16",
         "mqa64_d128_b1"}
QDT = {"int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn}


def layer_inputs(B, H, Hkv, D, S, kvd, pos):
    """One layer's q, caches (quantized by the torch reference), new k, v and RoPE tables."""
    dev = "cuda"
    q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.bfloat16)
    scales = (None, None)
    if kvd != "bf16":
        (k, ks), (v, vs) = kv_quant.reference(k, kvd), kv_quant.reference(v, kvd)
        scales = (ks, vs)
    kn = torch.randn(B, Hkv, D, device=dev, dtype=torch.bfloat16)
    vn = torch.randn(B, Hkv, D, device=dev, dtype=torch.bfloat16)
    ang = torch.rand(S, D // 2, device=dev)
    cos = torch.cat([ang.cos()] * 2, -1).contiguous()
    sin = torch.cat([ang.sin()] * 2, -1).contiguous()
    return q, k, v, scales, (kn, vn, cos, sin)


def kv_bytes(B, Hkv, D, kv_len, kvd):
    return 2 * B * Hkv * kv_len * (D * (1 if kvd != "bf16" else 2) + (4 if kvd != "bf16" else 0))


_PLAN = da.plan


def _plan_min_split(shortest: int):
    """``decode_attention.plan`` with splits of at least ``shortest`` positions (a multiple of
    the plan's own, at most the whole cache), the merge folded where ``fold_pays`` says."""
    def plan(batch, n_kv_heads, G, head_dim, capacity, quant, n_sm):
        n, length, _ = _PLAN(batch, n_kv_heads, G, head_dim, capacity, quant, n_sm)
        if length < shortest:
            length = min(-(-shortest // length) * length, -(-capacity // length) * length)
            n = -(-capacity // length)
        return n, length, fold_pays(G, n)
    return plan


def set_variant(name):
    """Set the module's plan for ``name``; returns ``(fold_merge, pdl)`` for the call."""
    da.plan = _plan_min_split(MIN_SPLIT[name]) if name in MIN_SPLIT else _PLAN
    if name in LEVERS:
        per_sm, da.PARTIALS_16, pdl, da.MERGE_PDL = LEVERS[name]
        da.PER_SM, da.MERGE_BUDGET = per_sm, 8192
        return None, pdl
    fold, per_sm, budget = VARIANTS[name]
    da.PER_SM, da.MERGE_BUDGET, da.PARTIALS_16, da.MERGE_PDL = per_sm, budget, False, False
    return fold, False


def time_shape(shape, variant, l2):
    name, B, H, Hkv, D, S, kvd = shape
    fold, pdl = set_variant(variant)
    pos_val = S - 40
    per = kv_bytes(B, Hkv, D, S, kvd)
    L = int(min(64, max(1, -(-2.5 * l2 // per))))
    L = min(L, max(1, int(20e9 // (per * 1.1))))  # memory
    pos = torch.tensor([pos_val], device="cuda")
    layers = [layer_inputs(B, H, Hkv, D, S, kvd, pos_val) for _ in range(L)]
    calls = [lambda x=x: da.decode_attention(x[0], x[1], x[2], pos, *x[3], fold_merge=fold,
                                             pdl=pdl, new_kv=x[4]) for x in layers]
    q, k, v, scales, _ = layers[0]  # the variant's output without the fold, against SDPA
    out = da.decode_attention(q, k, v, pos, *scales, fold_merge=fold)
    ref = da.reference(q, k, v, pos_val + 1, *scales)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    rounds = 3
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(rounds):
            for c in calls:
                c()
    g.replay()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (rounds * L))
    err = (out.float() - ref.float()).abs().max().item()
    del g, layers
    torch.cuda.empty_cache()
    us = statistics.median(times)
    nbytes = kv_bytes(B, Hkv, D, pos_val + 1, kvd)
    return dict(shape=name, variant=variant, B=B, H=H, Hkv=Hkv, G=H // Hkv, D=D, S=S, kv=kvd,
                layers=L, us=round(us, 3), us_min=round(min(times), 3),
                us_max=round(max(times), 3), kv_bytes=nbytes, gbs=round(nbytes / us / 1e3, 1),
                max_abs_err=round(err, 4))


def time_at_tile(shape, tile: dict, variant: str, l2: int, copy: float) -> dict:
    """``time_shape`` with the split kernel held to one tile (``decode_attention._FIXED``: a dict
    of ``BLOCK_N``, ``num_warps``, ``num_stages``, optionally ``maxnreg``): its row, with ``tile``
    as ``n<BLOCK_N>w<warps>s<stages>`` (``r<maxnreg>`` when capped) and ``frac_copy``, the rate
    over ``copy`` (bytes/s, measured in the same process)."""
    da._FIXED = dict(tile)
    r = time_shape(shape, variant, l2)
    r.update(tile="n{BLOCK_N}w{num_warps}s{num_stages}".format(**tile)
             + (f"r{tile['maxnreg']}" if "maxnreg" in tile else ""),
             frac_copy=round(r["gbs"] * 1e9 / copy, 3))
    return r


def cmd_time(path, levers: bool = False, only: tuple = ()):
    from sweep.measure.ceilings import _copy_rate
    from sweep.measure.timing import Timer

    switches.set_current(switches.Switches(autotune=False))
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy = _copy_rate(Timer("cuda"), 1 << 30, "cuda")["copy_bytes_s"]
    rows = []
    for shape in SHAPES:
        for variant in (LEVERS if levers else VARIANTS):
            if only and variant not in only:
                continue
            if levers and shape[0] not in LEVER_SHAPES:
                continue
            if not levers and variant not in FULL and shape[0] not in SWEPT:
                continue
            r = time_shape(shape, variant, l2)
            r["frac_copy"] = round(r["gbs"] * 1e9 / copy, 3)
            rows.append(r)
            print(",".join(str(r[k]) for k in ("shape", "variant", "us", "gbs", "frac_copy")),
                  flush=True)
    write_rows(path, rows)
    print(f"copy bandwidth {copy / 1e9:.1f} GB/s; device {torch.cuda.get_device_name()}")


def cmd_child(variant, hkv):
    switches.set_current(switches.Switches(autotune=False))
    fold, pdl = set_variant(variant)
    B, H, D, S = 8, 32, 64, 4160
    q, k, v, scales, new_kv = layer_inputs(B, H, int(hkv), D, S, "bf16", S - 40)
    pos = torch.tensor([S - 40], device="cuda")
    for _ in range(3):
        da.decode_attention(q, k, v, pos, *scales, fold_merge=fold, pdl=pdl, new_kv=new_kv)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    da.decode_attention(q, k, v, pos, *scales, fold_merge=fold, pdl=pdl, new_kv=new_kv)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def cmd_ncu(out_dir, variants):
    from sweep.measure import ncu

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "launch__grid_size",
             "launch__registers_per_thread", "sm__maximum_warps_per_active_cycle_pct")
    rows = []
    for variant in variants:
        for hkv in (32, 8, 1):
            csv_path = out / f"ncu_{variant}_g{32 // hkv}.csv"
            wrap = ncu.command(csv_path, "detail", extra=extra)
            subprocess.run(wrap + [sys.executable, "-m", "bench.attention_probe", "child", variant,
                                   str(hkv)],
                           check=False, timeout=300)
            for r in ncu.parse_csv(csv_path.read_text(), extra):
                rows.append({"variant": variant, "G": 32 // hkv, **r})
    keys = sorted({k for r in rows for k in r})
    with open(out / "ncu_summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    what = sys.argv[1]
    if what in ("time", "levers"):
        cmd_time(sys.argv[2], levers=what == "levers", only=tuple(sys.argv[3:]))
    elif what == "child":
        cmd_child(sys.argv[2], sys.argv[3])
    elif what == "ncu":
        cmd_ncu(sys.argv[2], sys.argv[3:] or ["before", "fold_vec", "kernel"])
