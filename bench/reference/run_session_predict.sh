#!/usr/bin/env bash
# One device call of shipped-experiment studies priced from the calibration shipped with the
# package (CAL= for run_predict.sh), within BUDGET_S: `bash run_session_predict.sh b1:head_dim
# b8:kv_quant ...` runs each WORKLOAD:EXPERIMENT in order while time is left (each cut at the
# time left), then the error check per workload; everything under $OUT as one tarball (out.tgz).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
t0=$(date +%s)
. bench/reference/session_common.sh
device_info
ceilings_first  # on a machine just started: from idle; kept beside the studies'
for item in "$@"; do
  w=${item%%:*}; e=${item#*:}
  left=$(( ${BUDGET_S:-560} - 25 - ($(date +%s) - t0) )); [ "$left" -lt 30 ] && break
  CAL= TIMEOUT_S=$left OUT=$OUT bash bench/reference/run_predict.sh "$w" "$e" > /dev/null
done
for w in b1 b8; do
  ls -d results/ref-predict/*-$w >/dev/null 2>&1 && OUT=$OUT bash bench/reference/run_predict.sh check $w > /dev/null
done
cat "$OUT"/rc.txt
summary "$OUT"/check_*.json
pack
