"""Decode attention over a one-byte KV cache with its products on the one-byte operands (issue 34 item 4).

    python -m bench.qk8_probe OUT          # OUT/qk8.csv (GPU)
    python -m bench.qk8_probe --sass       # no GPU: each variant's main loop for sm_90a, SASS

Under ncu the int8 / fp8 decode-attention loop is bound by the instructions it issues, not by its
loads: 958 / 780 warp-instructions an iteration against bf16's 269, 3.6x / 2.9x a byte read
(``results/reference/decode_levers_h100.md``, s. 18's ncu section). The largest share is the
widening of K and V to 16 bits and the widened operands' trip back from shared memory by narrow
loads. The lever that section names first: the products on the one-byte operands themselves.
q is quantized per (sequence, query head) row to the cache's format (int8: ``round(q / s_q)``
with ``s_q = max|q| / 127``; e4m3: ``q / s_q`` rounded to e4m3, ``s_q = max|q| / 448``), and
``s = (q8 . k8) * s_q * s_k * sm_scale`` runs as one 8-bit MMA (int32 accumulators for int8,
float32 for e4m3): K is never widened (``QK8``). The same for P.V (``PV8``): the probabilities
times V's per-position scale quantized per row (``[0, 127]`` / e4m3), ``acc += (p8 . v8) * s_p``.
(The quantized q of SageAttention, Zhang et al. 2024, arXiv:2410.02367, is the same idea.)

``_qk8_split`` is ``kernels.decode_attention``'s split kernel trimmed to what this question needs
(no RoPE fold, sinks or in-launch merge; the merge is ``kernels.split_merge.merge_kernel``, the
split plan the shipped ``plan``), with the two switches; with both off it computes what the
shipped kernel does. Each shape runs the shipped ``decode_attention`` (fixed tile) and the probe
kernel's three variants at a grid of tiles, timed as the step meets a layer (one call per layer
over enough layers that their KV exceeds 2.5x the L2, in a CUDA graph, median of 5 replays), the
error against ``kernels.decode_attention.reference`` beside each. Nothing shipped changes.
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from kernels import decode_attention as da
from kernels.split_merge import merge_kernel

PV_SCALE = da.PV_SCALE


@triton.jit
def _qk8_split(q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, pos_ptr, o_ptr, lse_ptr,
               s_qb, s_qh, s_kb, s_kh, s_ks, s_sb, s_sh, sm_scale, split_len, n_splits, n_heads,
               G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
               BLOCK_N: tl.constexpr, QUANT: tl.constexpr, QK8: tl.constexpr,
               PV8: tl.constexpr, F32: tl.constexpr, PV_SCALE_: tl.constexpr,
               SWAP: tl.constexpr = False):
    # QUANT 1 int8, 2 e4m3. Programs (sequence, KV head, split) as kernels.decode_attention.
    b = tl.program_id(0).to(tl.int64)
    hkv = tl.program_id(1)
    split = tl.program_id(2)
    kv_len = tl.load(pos_ptr).to(tl.int32) + 1
    start = split * split_len
    end = tl.minimum(start + split_len, kv_len)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    gmask = offs_g < G
    dmask = offs_d < D
    heads = hkv * G + offs_g
    q = tl.load(q_ptr + b * s_qb + heads[:, None] * s_qh + offs_d[None, :],
                mask=gmask[:, None] & dmask[None, :], other=0.0)
    OPS16: tl.constexpr = QUANT == 2 and not F32  # the shipped fp8 path: dots in fp16
    if F32:
        q = q.to(tl.float32)
    elif OPS16:
        q = q.to(tl.float16)
    if QK8:  # q per row in the cache's one-byte format
        qf = q.to(tl.float32)
        qmax = tl.maximum(tl.max(tl.abs(qf), axis=1), 1e-30)
        if QUANT == 1:
            q_sc = qmax / 127.0
            qs = qf / q_sc[:, None]
            q8 = (qs + tl.where(qs >= 0, 0.5, -0.5)).to(tl.int8)
        else:
            q_sc = qmax / 448.0
            q8 = (qf / q_sc[:, None]).to(tl.float8e4nv)
        q_sc = q_sc * sm_scale
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_sum = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    k_base = k_ptr + b * s_kb + hkv * s_kh
    v_base = v_ptr + b * s_kb + hkv * s_kh
    sc_base = b * s_sb + hkv * s_sh
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        nmask = offs_n < end
        kv_mask = nmask[:, None] & dmask[None, :]
        k = tl.load(k_base + offs_n[:, None] * s_ks + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * s_ks + offs_d[None, :], mask=kv_mask, other=0.0)
        ksc = tl.load(ks_ptr + sc_base + offs_n, mask=nmask, other=0.0)
        vsc = tl.load(vs_ptr + sc_base + offs_n, mask=nmask, other=0.0)
        if QK8:
            if F32:  # the interpreter: the same integer / e4m3 products in float32
                s = tl.dot(q8.to(tl.float32), tl.trans(k.to(tl.float32)))
            elif SWAP:  # s^T = k8 . q8^T: the cache tile fills the MMA's 64-row side (wgmma)
                if QUANT == 1:
                    s = tl.trans(tl.dot(k, tl.trans(q8), out_dtype=tl.int32).to(tl.float32))
                else:
                    s = tl.trans(tl.dot(k, tl.trans(q8)))
            elif QUANT == 1:
                s = tl.dot(q8, tl.trans(k), out_dtype=tl.int32).to(tl.float32)
            else:
                s = tl.dot(q8, tl.trans(k))
            s = s * q_sc[:, None] * ksc[None, :]
        else:
            s = tl.dot(q, tl.trans(k.to(q.dtype))) * sm_scale * ksc[None, :]
        s = tl.where(nmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l_sum = l_sum * alpha + tl.sum(p, axis=1)
        if PV8:  # p * v_scale per row in the one-byte format (all >= 0)
            pv = p * vsc[None, :]
            p_sc = tl.maximum(tl.max(pv, axis=1), 1e-30)
            if QUANT == 1:
                p_sc = p_sc / 127.0
                p8 = (pv / p_sc[:, None] + 0.5).to(tl.int8)
            else:
                p_sc = p_sc / 448.0
                p8 = (pv / p_sc[:, None]).to(tl.float8e4nv)
            if F32:
                pvv = tl.dot(p8.to(tl.float32), v.to(tl.float32))
            elif QUANT == 1:
                pvv = tl.dot(p8, v, out_dtype=tl.int32).to(tl.float32)
            else:
                pvv = tl.dot(p8, v)
            acc = acc * alpha[:, None] + pvv * p_sc[:, None]
        else:  # the shipped path: V widened, p * v_scale (x PV_SCALE in fp16) rounded
            if OPS16:
                vsc = vsc * PV_SCALE_
            acc = acc * alpha[:, None] + tl.dot((p * vsc[None, :]).to(q.dtype), v.to(q.dtype))
        m = m_new
    if OPS16 and not PV8:
        acc = acc * (1.0 / PV_SCALE_)
    empty = l_sum == 0.0
    out = acc / tl.where(empty, 1.0, l_sum)[:, None]
    lse = tl.where(empty, float("-inf"), m + tl.log(tl.where(empty, 1.0, l_sum)))
    row = (b * n_heads + heads) * n_splits + split
    tl.store(o_ptr + row[:, None] * BLOCK_D + offs_d[None, :], out, mask=gmask[:, None])
    tl.store(lse_ptr + row, lse, mask=gmask)


def qk8_attention(q, k_cache, v_cache, pos, k_scale, v_scale, qk8: bool = True,
                  pv8: bool = False, tile: tuple = (64, 4, 3), swap: bool = False
                  ) -> torch.Tensor:
    """``kernels.decode_attention.decode_attention``'s contract for a one-byte cache (no
    ``new_kv``, no sinks): q ``[B, H, D]``, caches ``[B, Hkv, S, D]`` int8 / float8_e4m3fn with
    scales ``[B, Hkv, S]`` float32, ``pos`` an int64 device tensor; ``tile = (BLOCK_N,
    num_warps, num_stages)``. Returns ``[B, H, D]`` in q's dtype."""
    B, H, D = q.shape
    Hkv, S = k_cache.shape[1], k_cache.shape[2]
    G = H // Hkv
    interp = q.device.type == "cpu"
    n_splits, split_len, _ = da.plan(B, Hkv, G, D, S, True, 4 if interp else
                                     torch.cuda.get_device_properties(q.device)
                                     .multi_processor_count)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    o_part = torch.empty(B * H * n_splits, BLOCK_D, device=q.device, dtype=torch.float32)
    lse = torch.empty(B * H * n_splits, device=q.device, dtype=torch.float32)
    out = torch.empty(B, H, D, device=q.device, dtype=q.dtype)
    bn, warps, stages = tile
    _qk8_split[(B, Hkv, n_splits)](
        q, k_cache, v_cache, k_scale, v_scale, pos, o_part, lse,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        k_scale.stride(0), k_scale.stride(1), D**-0.5, split_len, n_splits, H,
        G=G, BLOCK_G=max(16, triton.next_power_of_2(G)), D=D, BLOCK_D=BLOCK_D,
        BLOCK_N=64 if interp else bn, QUANT=1 if k_cache.dtype == torch.int8 else 2, QK8=qk8,
        PV8=pv8, F32=interp, PV_SCALE_=PV_SCALE, SWAP=swap, num_warps=warps, num_stages=stages)
    merge_kernel[(B * H,)](o_part, lse, out, n_splits, D=D, BLOCK_D=BLOCK_D,
                           BLOCK_S=max(2, triton.next_power_of_2(n_splits)), num_warps=4)
    return out


SHAPES = [  # name, B, H, Hkv, D, capacity, kv_dtype: item 4's shape, the main job's one-byte rows
    ("b64_8k_int8", 64, 32, 8, 64, 8256, "int8"), ("b64_8k_fp8", 64, 32, 8, 64, 8256, "fp8_e4m3"),
    ("main_g4_int8", 8, 32, 8, 64, 4160, "int8"), ("main_g4_fp8", 8, 32, 8, 64, 4160, "fp8_e4m3"),
    ("main_g16_int8", 8, 32, 2, 64, 4160, "int8"), ("main_g16_fp8", 8, 32, 2, 64, 4160, "fp8_e4m3"),
]
TILES = [(64, 4, 2), (64, 4, 3), (128, 4, 2), (128, 4, 3), (128, 8, 3), (256, 8, 2)]
VARIANTS = {"probe_base": (False, False, False), "qk8": (True, False, False),
            "qk8_pv8": (True, True, False), "qk8_swap": (True, False, True),
            "qk8_swap_pv8": (True, True, True)}


def _graph_us(calls, rounds: int = 3) -> float:
    """us per call of ``calls`` replayed ``rounds`` times in one CUDA graph (median of 5)."""
    from kernels.graph_timing import _replay_ms
    return _replay_ms(calls, rounds) * 1e3 / len(calls)


def shape_rows(shape, l2: int, copy: float) -> list[dict]:
    """The rows of one shape: the shipped kernel at each tile, then each variant at each tile."""
    from bench.attention_probe import kv_bytes, layer_inputs
    from kernels import switches
    name, B, H, Hkv, D, S, kvd = shape
    pos_val = S - 40
    per = kv_bytes(B, Hkv, D, S, kvd)
    L = int(min(64, max(1, -(-2.5 * l2 // per))))
    pos = torch.tensor([pos_val], device="cuda")
    layers = [layer_inputs(B, H, Hkv, D, S, kvd, pos_val)[:4] for _ in range(L)]
    q, k, v, (ks, vs) = layers[0]
    ref = da.reference(q, k, v, pos_val + 1, ks, vs).float()
    nbytes = kv_bytes(B, Hkv, D, pos_val + 1, kvd)
    rows = []
    switches.set_current(switches.Switches(autotune=False))
    for tile in TILES:
        bn, w, st = tile
        runs = {"shipped": lambda x, t=tile: da.decode_attention(x[0], x[1], x[2], pos, *x[3])}
        for var, (a, b, c) in VARIANTS.items():
            runs[var] = lambda x, t=tile, a=a, b=b, c=c: qk8_attention(
                x[0], x[1], x[2], pos, *x[3], qk8=a, pv8=b, tile=t, swap=c)
        da._FIXED = {"BLOCK_N": bn, "num_warps": w, "num_stages": st}
        for var, fn in runs.items():
            row = dict(shape=name, B=B, H=H, Hkv=Hkv, D=D, kv=kvd, layers=L,
                       tile=f"n{bn}w{w}s{st}", variant=var)
            try:
                err = float((fn(layers[0]).float() - ref).abs().max())
                us = _graph_us([lambda x=x, fn=fn: fn(x) for x in layers])
                row.update(us=round(us, 2), frac_copy=round(nbytes / us / 1e-6 / copy, 3),
                           max_abs_err=round(err, 5))
            except Exception as e:  # a tile that does not fit, an MMA the compiler refuses
                row["error"] = f"{type(e).__name__}: {str(e)[:120]}"
            rows.append(row)
            print(row, flush=True)
    del layers
    torch.cuda.empty_cache()
    return rows


def main(out: str) -> None:
    """Every shape of ``SHAPES`` into ``out/qk8.csv``, with a summary of the best tile of each
    variant against the shipped kernel's best."""
    from pathlib import Path

    from bench.gpu import write_rows
    from sweep.measure.ceilings import _copy_rate
    from sweep.measure.timing import Timer
    Path(out).mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy = _copy_rate(Timer("cuda"), 1 << 30, "cuda")["copy_bytes_s"]
    rows = []
    for shape in SHAPES:
        rows += shape_rows(shape, l2, copy)
        write_rows(f"{out}/qk8.csv", rows)
        best = {}
        for r in rows:
            if r["shape"] == shape[0] and "us" in r:
                if r["variant"] not in best or r["us"] < best[r["variant"]]["us"]:
                    best[r["variant"]] = r
        print("BEST", shape[0], {v: (r["tile"], r["us"], r["frac_copy"], r["max_abs_err"])
                                 for v, r in best.items()}, flush=True)
    print(f"copy {copy / 1e12:.3f} TB/s", flush=True)


def compile_sm90(kv: str, qk8: bool, pv8: bool, tile: tuple, G: int = 4, D: int = 64,
                 swap: bool = False):
    """``_qk8_split`` compiled for sm_90a with no GPU, as the JIT would specialise it (pointers
    and the cache's strides divisible by 16), with Triton's ``triton.compile``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = _qk8_split.arg_names
    strides = ["s_qb", "s_qh", "s_kb", "s_kh", "s_ks", "s_sb", "s_sh"]
    sig = dict.fromkeys(names, "i32")
    sig.update(q_ptr="*bf16", k_ptr="*i8" if kv == "int8" else "*fp8e4nv", pos_ptr="*i64",
               sm_scale="fp32")
    sig["v_ptr"] = sig["k_ptr"]
    sig.update(dict.fromkeys(["ks_ptr", "vs_ptr", "o_ptr", "lse_ptr"], "*fp32"))
    bn, warps, stages = tile
    const = dict(G=G, BLOCK_G=max(16, triton.next_power_of_2(G)), D=D, BLOCK_D=D, BLOCK_N=bn,
                 QUANT=1 if kv == "int8" else 2, QK8=qk8, PV8=pv8, F32=False,
                 PV_SCALE_=PV_SCALE, SWAP=swap)
    sig.update(dict.fromkeys(const, "constexpr"))
    div = [n for n in names if n.endswith("_ptr")] + [x for x in strides if x != "s_sh"] + [
        "split_len"]
    src = ASTSource(fn=_qk8_split, signature={n: sig[n] for n in names},
                    constexprs={(names.index(n),): v for n, v in const.items()},
                    attrs={(names.index(n),): [["tt.divisibility", 16]] for n in div})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, num_stages=stages))


def sass_table(tiles=((128, 4, 3), (128, 4, 2), (64, 4, 3))) -> None:
    """Print each variant's main loop (``bench.split_resources.sass_loop``): warp-instructions
    an iteration, per KB of K and V read, shared memory a program and the largest opcodes."""
    from bench.split_resources import sass_loop
    print(f"triton {triton.__version__}, sm_90a, G 4, head_dim 64")
    print("| cache | tile | variant | loop instructions a warp | a program's per KB read | "
          "smem KB | top opcodes |")
    print("|---|---|---|---:|---:|---:|---|")
    for kv in ("int8", "fp8"):
        for tile in tiles:
            for var, (a, b, c) in VARIANTS.items():
                try:
                    k = compile_sm90(kv, a, b, tile, swap=c)
                    r = sass_loop(k, tile[1], 2 * tile[0] * 64 / 1024)
                    top = ", ".join(f"{o} {c}" for o, c in r["ops"].most_common(7))
                    print(f"| {kv} | n{tile[0]}w{tile[1]}s{tile[2]} | {var} | "
                          f"{r['instructions']} | {r['per_kb']:.1f} | "
                          f"{k.metadata.shared / 1024:.1f} | {top} |", flush=True)
                except Exception as e:  # the compiler refused the variant
                    print(f"| {kv} | n{tile[0]}w{tile[1]}s{tile[2]} | {var} | "
                          f"{type(e).__name__}: {str(e)[:100]} | | | |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--sass"]:
        sass_table()
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "out")
