#!/usr/bin/env bash
# One H100 call: bench.power_mix_probe (a compute-bound GEMM's slow-down under the power limit
# when the stage around it is part memory-bound: issue 38 item 4's prefill pricing), then
# issue 38's `+experiment=moe_granularity` under its routing (run_moe_fronts.sh, ROUTER=0).
#   OUT=DIR bash bench/reference/run_power_mix.sh   # $OUT/power.tgz, $OUT/gran/all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT/power"
t0=$(date +%s)
. bench/reference/gpu_host.sh
gpu_card "$OUT/power/card.txt"
timeout "${PROBE_TIMEOUT:-120}" python3 -m bench.power_mix_probe "$OUT/power" > "$OUT/power/probe.log" 2>&1
echo "probe rc=$? wall_s=$(( $(date +%s) - t0 ))"; tail -n 14 "$OUT/power/probe.log"
(cd "$OUT" && tar czf power.tgz --remove-files power)
EXP=moe_granularity ROUTER=0 STUDY_TIMEOUT=${STUDY_TIMEOUT:-$(( 560 - ($(date +%s) - t0) ))} \
  OUT=$OUT/gran bash bench/reference/run_moe_fronts.sh 2>&1 | tail -n 16
echo "call wall_s=$(( $(date +%s) - t0 ))"
