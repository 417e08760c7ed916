#!/usr/bin/env bash
# The one-byte split plan at fixed aims of 2 / 4 / 8 / 16 programs a SM (the shipped rule,
# kernels.decode_attention.plan, aims at one wave; before it, 16) over the shipped experiments'
# one-byte shapes and b64 x 8k, at the tiles the tuner picks (bench.splits_probe plan); the best
# aim per shape. Record: decode_levers_h100.md section 19.
#   OUT=out bash bench/reference/run_split_plan.sh   # $OUT/all.tgz: splits/ (kernels.csv), card.txt
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/splits"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout ${SPLITS_TIMEOUT:-400} python3 -m bench.splits_probe "$OUT/splits" plan > "$OUT/splits/probe.log" 2>&1
echo "splits rc=$?"; tail -n 2 "$OUT/splits/probe.log" | cut -c1-300
python3 - "$OUT/splits" <<'PY'
import sys, pandas as pd
try:
    k = pd.read_csv(f"{sys.argv[1]}/kernels.csv")
    m = k.groupby(["shape", "per_sm", "tile"])["us"].median().unstack("tile")
    b = m.min(axis=1).unstack("per_sm")
    print(m.round(2).to_string()); print((b.div(b[16], axis=0) - 1).mul(100).round(1).to_string())
    print(k.groupby(["shape", "per_sm"])["n_splits"].first().unstack("per_sm").to_string())
    print("max err", k["max_abs_err"].max())
except Exception as e:
    print("no splits table", e)
PY
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
