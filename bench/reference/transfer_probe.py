"""What a calibration's transfer to this GPU rests on, measured: this GPU's ceilings (twice, by
``sweep.measure.ceilings``) and a sample of the shipped H100 calibration's own entries timed
again here, by the calibration's micro-benchmarks (``sweep.measure.calibration_run.measure``):
compute-bound GEMMs and memory-bound decode GEMVs. On the H100 it says how today's machine
reads the entries the shipped table holds (and so which ceilings stand for that table); on
another GPU, the ratio each entry really moves by, beside the ratio of the ceilings that
``sweep.analysis.predict.transfer`` applies. Development data: no held-out pair is timed.

    python bench/reference/transfer_probe.py OUT.json   (on a GPU)
"""

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.switches import Switches  # noqa: E402
from sweep.analysis import calibration_store as store  # noqa: E402
from sweep.common.env import detect_device, environment  # noqa: E402
from sweep.measure import calibration_run, ceilings  # noqa: E402

SRC = "NVIDIA H100 80GB HBM3"


def sample(table):
    """16 compute-bound GEMMs (the largest M of 16 (N, K) pairs) and 24 GEMVs (M 1 and 8)."""
    g = table[(table.kind == "gemm") & (table.M >= 4096)]
    g = g.sort_values("M").groupby(["N", "K"]).tail(1)
    g = g.iloc[:: max(len(g) // 16, 1)].head(16)
    v = table[(table.kind == "gemv") & table.M.isin([1, 8])].sort_values("bytes")
    v = v.iloc[:: max(len(v) // 24, 1)].head(24)
    return ([[int(r.M), int(r.N), int(r.K)] for r in g.itertuples()],
            [[int(r.M), int(r.N), int(r.K), r.prologue] for r in v.itertuples()])


def main() -> int:
    out = Path(sys.argv[1])
    dev = detect_device("cuda")
    shipped = store.shipped(SRC)
    meta, table = shipped.meta, shipped.table
    gemm, gemv = sample(table)
    t0 = time.time()
    ceil = [ceilings.measure("cuda")]
    spec = {"device": "cuda", "quick": False, "switches": Switches().to_dict(), "base": [],
            "gemm": gemm, "gemv": gemv, "decode_attn": [], "prefill_attn": []}
    rows = calibration_run.measure(spec)
    ceil.append(ceilings.measure("cuda"))
    keys = {"gemm": ["M", "N", "K"], "gemv": ["M", "N", "K", "prologue"]}
    pairs = []
    for r in rows:
        k = keys[r["kind"]]
        t = table[table.kind == r["kind"]]
        for c in k:
            t = t[t[c] == r[c]]
        if len(t):
            pairs.append({"kind": r["kind"], **{c: r[c] for c in k},
                          "time_s_table": float(t.time_s.iloc[0]), "time_s_here": r["time_s"],
                          "here_over_table": r["time_s"] / float(t.time_s.iloc[0])})
    summ = {kind: statistics.median(p["here_over_table"] for p in pairs if p["kind"] == kind)
            for kind in keys if any(p["kind"] == kind for p in pairs)}
    src = meta["ceilings"]
    res = {"env": environment(dev), "wall_s": round(time.time() - t0, 1),
           "table": {"device": meta.get("device"), "date": meta.get("date"),
                     "ceilings": src},
           "ceilings_here": ceil, "median_here_over_table": summ,
           "ceilings_ratio_table_over_here": {
               k: [src[k] / c[k] for c in ceil] for k in
               ("gemm_flops_bf16", "gemm_flops_bf16_sustained", "copy_bytes_s")},
           "entries": pairs}
    out.write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps({k: res[k] for k in ("wall_s", "median_here_over_table",
                                          "ceilings_ratio_table_over_here")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
