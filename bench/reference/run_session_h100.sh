#!/usr/bin/env bash
# One H100 device call (2026-11-25): the shipped H100 calibration re-measured where today's kernels
# made it stale (calibrate_more: the GEMV and launch families after the PDL fix of 9fb4cce), then
# the README's main job on a fresh machine (every cache removed) with the re-shipped files, then
# the b8 shipped experiments (B8, default gqa_vs_mha head_dim) from the shipped calibration for
# the time left. CALIBRATE=0 leaves out the first step. Everything under $OUT
# (one tarball: out.tgz), the re-shipped calibration and tile choices included.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
t0=$(date +%s)
. bench/reference/session_common.sh
if [ "${CALIBRATE:-1}" = 1 ]; then  # CALIBRATE=0: the shipped calibration as committed
  CAL_TIMEOUT=${CAL_TIMEOUT:-240} OUT=$OUT/calibrate bash bench/reference/run_fresh.sh calibrate_more
  mkdir -p "$OUT/shipped"; cp sweep/analysis/calibrations/nvidia_h100* "$OUT/shipped/"
fi
MAIN_TIMEOUT=${MAIN_TIMEOUT:-220} OUT=$OUT/fresh bash bench/reference/run_fresh.sh fresh_main
cp results/ceilings/*.json "$OUT/fresh/" 2>/dev/null  # the ceilings the fresh main job measured
left=$(( ${BUDGET_S:-570} - ($(date +%s) - t0) ))
echo "left for b8: $left s" | tee "$OUT/left.txt"
if [ "$left" -gt 60 ]; then
  for e in ${B8:-gqa_vs_mha head_dim}; do
    left=$(( ${BUDGET_S:-570} - ($(date +%s) - t0) )); [ "$left" -lt 40 ] && break
    CAL= TIMEOUT_S=$left OUT=$OUT/b8 bash bench/reference/run_predict.sh b8 $e
  done
  OUT=$OUT/b8 bash bench/reference/run_predict.sh check b8
fi
pack
