#!/usr/bin/env bash
# One H200 device call (2026-11-25): the H200's ceilings measured first on the just-started
# machine (the warm-up from idle of sweep.measure.ceilings checked), then the shipped
# experiments at batch 1 priced from the H100 calibration shipped with the package, transferred
# (run_predict.sh h200 b1); everything under $OUT as one tarball (out.tgz).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/session_common.sh
device_info
ceilings_first
CAL=sweep/analysis/calibrations/nvidia_h100_80gb_hbm3.json BUDGET_S=${BUDGET_S:-500} OUT=$OUT \
  bash bench/reference/run_predict.sh h200 b1 > "$OUT/run.log" 2>&1
summary "$OUT/check_h200.json"
pack
