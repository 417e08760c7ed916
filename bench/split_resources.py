"""Registers, spills and shared memory of decode attention's split kernel per tile, compiled for
sm_90a with no GPU: how many programs an H100 / H200 SM can hold (65536 registers, 228 KB of
shared memory, 64 warps), and what a ``maxnreg`` cap costs in spills.

    python -m bench.split_resources            # the b64 x 8k shape's tiles, bf16 / int8 / fp8
    python -m bench.split_resources --sass     # and each tile's main loop, SASS by opcode

Compiled as the JIT would (``tt.divisibility`` 16 on pointers and on strides that the b64 x 8k
cache gives, RoPE and the cache write folded, the merge folded, PDL), with Triton's own
``triton.compile`` and the ``ptxas`` of its bundle (``ptxas-blackwell`` where the plain one is
older than the PTX). Figures depend on the Triton version: run it with the GPU hosts' (3.6).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels.decode_attention import _split_kernel
from kernels.rope import QMAX

REGS_PER_SM, SMEM_PER_SM, WARPS_PER_SM = 65536, 228 * 1024, 64  # H100 / H200 (sm_90)
TILES = {"bf16": [(64, 4, 2, None), (64, 4, 3, None)],
         "int8": [(128, 4, 2, None), (128, 4, 3, None), (64, 4, 3, None), (64, 4, 3, 80),
                  (64, 4, 3, 64), (128, 4, 2, 96)],
         "fp8": [(128, 4, 2, None), (128, 4, 3, None), (64, 4, 3, None), (64, 4, 3, 80)]}
_PTR = {"bf16": "*bf16", "int8": "*i8", "fp8": "*fp8e4nv"}
_STRIDES = "s_qb s_qh s_kb s_kh s_ks s_vb s_vh s_vs s_sb s_sh s_nb s_nh".split()


def _ptxas() -> str:
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    new = bin_dir / "ptxas-blackwell"
    return str(new if new.exists() else bin_dir / "ptxas")


def _compile(kv: str, block_n: int, warps: int, stages: int, maxnreg: int | None = None,
             G: int = 4, D: int = 64):
    """The split kernel compiled for sm_90a as the JIT would (module doc): Triton's kernel."""
    quant = kv != "bf16"
    sig = dict.fromkeys(["q_ptr", "out_ptr", "kn_ptr", "vn_ptr", "kr_ptr"], "*bf16")
    sig.update(k_ptr=_PTR[kv], v_ptr=_PTR[kv], pos_ptr="*i64", cnt_ptr="*i32")
    sig.update(dict.fromkeys(["ks_ptr", "vs_ptr", "o_ptr", "lse_ptr", "cos_ptr", "sin_ptr",
                              "sink_ptr"], "*fp32"))
    sig.update(dict.fromkeys(_STRIDES + ["split_len", "n_splits", "n_heads", "n_kv_heads",
                                         "capacity"], "i32"), sm_scale="fp32")
    const = dict(G=G, BLOCK_G=16, D=D, BLOCK_D=D, BLOCK_N=block_n, QUANT=(2 if kv == "fp8" else 1)
                 if quant else 0, F32=False, MERGE=True, BLOCK_S=2, PDL=True, PV_SCALE=1024.0,
                 OPS16=kv == "fp8", ROPE=True, HALF=D // 2, BLOCK_HALF=D // 2,
                 QMAX_=QMAX["fp8_e4m3" if kv == "fp8" else "int8"] if quant else 1.0,
                 MERGE_GC=4, SINK=False)
    sig.update(dict.fromkeys(const, "constexpr"))
    names = _split_kernel.arg_names
    div = [n for n in names if n.endswith("_ptr")] + [s for s in _STRIDES if s != "s_sh"] + [
        "split_len", "capacity"]
    src = ASTSource(fn=_split_kernel, signature={n: sig[n] for n in names},
                    constexprs={(names.index(n),): v for n, v in const.items()},
                    attrs={(names.index(n),): [["tt.divisibility", 16]] for n in div})
    opts = dict(num_warps=warps, num_stages=stages, **({"maxnreg": maxnreg} if maxnreg else {}))
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def _ptxas_run(k, d: str, *flags: str) -> str:
    (Path(d) / "k.ptx").write_text(k.asm["ptx"])
    log = subprocess.run([_ptxas(), "-arch=sm_90a", *flags, f"{d}/k.ptx", "-o", f"{d}/k.cubin"],
                         capture_output=True, text=True, check=True)
    return log.stdout + log.stderr


def resources(kv: str, block_n: int, warps: int, stages: int, maxnreg: int | None = None,
              G: int = 4, D: int = 64) -> dict:
    """The split kernel at one tile: ``regs`` a thread, ``spill_bytes``, ``smem_bytes`` a
    program and the programs a SM each of them allows (``by_regs``, ``by_smem``, ``by_warps``).

    Raises:
        subprocess.CalledProcessError: ``ptxas`` refused the PTX.
    """
    k = _compile(kv, block_n, warps, stages, maxnreg, G, D)
    with tempfile.TemporaryDirectory() as d:
        text = _ptxas_run(k, d, "-v")
    regs = int(re.findall(r"Used (\d+) registers", text)[-1])
    spill = int(re.findall(r"(\d+) bytes spill stores", text)[-1])
    smem = k.metadata.shared
    return dict(kv=kv, tile=f"n{block_n}w{warps}s{stages}" + (f"r{maxnreg}" if maxnreg else ""),
                regs=regs, spill_bytes=spill, smem_bytes=smem,
                by_regs=REGS_PER_SM // (-(-regs // 8) * 8 * 32 * warps),
                by_smem=SMEM_PER_SM // (smem + 1024), by_warps=WARPS_PER_SM // warps)


def loop_mix(kv: str, block_n: int, warps: int, stages: int, G: int = 4, D: int = 64) -> dict:
    """The split kernel's main loop in SASS (``cuobjdump -sass`` of Triton's bundle): the longest
    backward branch's body, ``instructions`` a warp an iteration by opcode (``ops``, predicates
    and modifiers dropped) and ``per_kb``: warp-instructions a program issues per KB of K and V
    it reads (an iteration reads ``2 * block_n * D`` elements of the cache's width).

    Raises:
        subprocess.CalledProcessError: ``ptxas`` or ``cuobjdump`` failed.
    """
    k = _compile(kv, block_n, warps, stages, None, G, D)
    kb = 2 * block_n * D * (2 if kv == "bf16" else 1) / 1024
    return dict(kv=kv, tile=f"n{block_n}w{warps}s{stages}", **sass_loop(k, warps, kb))


def sass_loop(k, warps: int, kb: float) -> dict:
    """A compiled Triton kernel ``k``'s longest loop in SASS (sm_90a): ``instructions`` a warp an
    iteration, ``ops`` by opcode, ``per_kb`` warp-instructions a program issues per ``kb`` KB an
    iteration reads.

    Raises:
        subprocess.CalledProcessError: ``ptxas`` or ``cuobjdump`` failed.
    """
    with tempfile.TemporaryDirectory() as d:
        _ptxas_run(k, d)
        sass = subprocess.run([str(Path(_ptxas()).parent / "cuobjdump"), "-sass", f"{d}/k.cubin"],
                              capture_output=True, text=True, check=True).stdout
    ins = [(int(m[1], 16), m[2]) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    back = [(int(t[1], 16), a) for a, op in ins if "BRA" in op
            for t in [re.search(r"0x([0-9a-f]+)", op)] if t and int(t[1], 16) < a]
    lo, hi = max(back, key=lambda r: r[1] - r[0])
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", op).split()[0].split(".")[0]
                              for a, op in ins if lo <= a <= hi)
    n = sum(ops.values())
    return dict(instructions=n, ops=ops, per_kb=n * warps / kb)


def main() -> int:
    if "--sass" in sys.argv[1:]:
        print("| cache | tile | loop instructions a warp | a program's per KB read | top opcodes |")
        print("|---|---|---:|---:|---|")
        for kv, t in (("bf16", (64, 4, 2)), ("bf16", (64, 4, 3)), ("int8", (128, 4, 2)),
                      ("int8", (128, 4, 3)), ("fp8", (128, 4, 3))):
            r = loop_mix(kv, *t)
            top = ", ".join(f"{o} {c}" for o, c in r["ops"].most_common(8))
            print(f"| {kv} | {r['tile']} | {r['instructions']} | {r['per_kb']:.1f} | {top} |",
                  flush=True)
        return 0
    print(f"triton {triton.__version__}, sm_90a, G 4, head_dim 64")
    print("| cache | tile | regs | spill B | smem KB | programs a SM (regs, smem, warps) |")
    print("|---|---|---:|---:|---:|---|")
    for kv, tiles in TILES.items():
        for t in tiles:
            r = resources(kv, *t)
            print(f"| {kv} | {r['tile']} | {r['regs']} | {r['spill_bytes']} | "
                  f"{r['smem_bytes'] / 1024:.1f} | {r['by_regs']}, {r['by_smem']}, "
                  f"{r['by_warps']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
