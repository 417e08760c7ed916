#!/usr/bin/env bash
# Issue 34, item 4: what bounds decode attention over a one-byte cache at batch 64 x 8k, in one
# call: the split plan's programs per SM 2 / 8 / 16 per fixed tile (bench.splits_probe; wave
# quantization: 512 programs of one split each for 132 SMs), then ncu's detail set over the split
# kernel (run_kv_ncu.sh: DRAM %, stalls, shared memory and the blocks a SM it allows, waves).
#   OUT=out bash bench/reference/run_kv_bound.sh   # NO_NCU=1: the splits alone
#     # $OUT/all.tgz: splits/, ncu/, card.txt
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/splits"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout ${SPLITS_TIMEOUT:-210} python3 -m bench.splits_probe "$OUT/splits" > "$OUT/splits/probe.log" 2>&1
echo "splits rc=$?"; tail -n 3 "$OUT/splits/probe.log" | cut -c1-300
python3 - "$OUT/splits" <<'PY'
import sys, pandas as pd
try:
    k = pd.read_csv(f"{sys.argv[1]}/kernels.csv")
    print(k.groupby(["shape", "tile", "per_sm"])["us"].median().unstack("per_sm").round(2).to_string())
    print(k.groupby(["shape", "per_sm"])[["us", "frac_copy"]].agg({"us": "min", "frac_copy": "max"}).round(3).to_string())
    print("max err", k["max_abs_err"].max())
except Exception as e:
    print("no splits table", e)
PY
[ -n "${NO_NCU:-}" ] || DESIGNS=${DESIGNS:-kv_int8} OUT=$OUT/ncu NCU_TIMEOUT=${NCU_TIMEOUT:-170} bash bench/reference/run_kv_ncu.sh
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
