#!/usr/bin/env bash
# Issue 34: decode attention's K, V tiles loaded a tile ahead by hand (KV_AHEAD), per kernel and
# in the kv-dominated decode step (bench.kv_ahead_probe), on a tree with
# results/reference/decode_levers_h100/s27_kv_ahead/kv_ahead.patch applied (refuted: section 15).
#   OUT=out bash bench/reference/run_kv_ahead.sh   # $OUT: card.txt, kernels.csv, step.csv, *.log, all.tgz
# PROBE=widen_probe: the same for bench.widen_probe (run_widen.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout ${KERNELS_TIMEOUT:-330} python3 -m bench.${PROBE:-kv_ahead_probe} kernels "$OUT" > "$OUT/kernels.log" 2>&1
echo "kernels rc=$?"; grep -v '^\s*$' "$OUT/kernels.log" | tail -n 4 | cut -c1-300
timeout ${STEP_TIMEOUT:-220} python3 -m bench.${PROBE:-kv_ahead_probe} step "$OUT" > "$OUT/step.log" 2>&1
echo "step rc=$?"; grep -v '^\s*$' "$OUT/step.log" | tail -n 14 | cut -c1-400
python3 - "$OUT" <<'PY'
import sys, pandas as pd
d = sys.argv[1]
try:
    k = pd.read_csv(f"{d}/kernels.csv")
    g = k.groupby(["shape", "tile", "ahead"])["us"].median().unstack("ahead")
    print(g.round(2).to_string())
    best = k.groupby(["shape", "ahead"])["us"].min().unstack("ahead")
    print((best.assign(change=(best[0] / best[1] - 1) * 100)).round(2).to_string())
    print("max err", k.groupby("ahead")["max_abs_err"].max().to_dict())
except Exception as e:
    print("no kernels table", e)
PY
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
