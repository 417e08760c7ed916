#!/usr/bin/env bash
# One H100 call holding what a session owes the H100 when it is seldom lent (each start that
# fails costs minutes of device time): the reship of the stale calibration families and the main
# job's gate on the shipped files (run_reship_gate.sh, NO_GEMV=1: the GEMV did not change), then
# issue 38's `+experiment=moe_vs_dense` under its routing (run_moe_fronts.sh, ROUTER=0) on the
# files just shipped. Each part tars its own folder: $OUT/gate/all.tgz, $OUT/vs/all.tgz; the
# shipped calibration and tile choices are in gate/all.tgz's reship/shipped/ (commit them).
#   OUT=DIR bash bench/reference/run_h100_pack.sh     # about 7-9 minutes on an H100
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
t0=$(date +%s)
NO_GEMV=1 CAL_TIMEOUT=${CAL_TIMEOUT:-200} OUT=$OUT/gate bash bench/reference/run_reship_gate.sh \
  2>&1 | grep -v "^\s*$" | tail -n 25
echo "reship+gate wall_s=$(( $(date +%s) - t0 ))"
ROUTER=0 STUDY_TIMEOUT=${STUDY_TIMEOUT:-$(( 560 - ($(date +%s) - t0) ))} OUT=$OUT/vs \
  bash bench/reference/run_moe_fronts.sh 2>&1 | tail -n 16
echo "pack wall_s=$(( $(date +%s) - t0 ))"
