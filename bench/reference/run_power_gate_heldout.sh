#!/usr/bin/env bash
# One H100 call after the power limit's duty entered the ceilings and the predictor
# (sweep.measure.ceilings' power_slowdown_by_duty, sweep.analysis.power.slowdown_at): the GPU
# tests of the ceilings, the main job's regression gate with every cache removed (the ceilings
# are measured again with the duties), then the frozen MoE set (issue 38 item 4) measured and
# priced in an empty results directory (its own ceilings, with the duties).
#   OUT=DIR bash bench/reference/run_power_gate_heldout.sh   # $OUT/gate/all.tgz, $OUT/heldout.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT/gate" "$OUT/heldout"
t0=$(date +%s)
. bench/reference/gpu_host.sh
gpu_card "$OUT/heldout/card.txt"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "ceilings or copies" \
  > "$OUT/heldout/tests.txt" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/heldout/tests.txt"
GATE_ONLY=1 OUT=$OUT/gate bash bench/reference/run_reship_gate.sh 2>&1 | grep -v "^\s*$" | tail -n 12
cp results/ceilings/*.json "$OUT/heldout/" 2>/dev/null
echo "gate wall_s=$(( $(date +%s) - t0 ))"
F=$(mktemp -d)
timeout "${VALIDATE_TIMEOUT:-$(( 575 - ($(date +%s) - t0) ))}" python3 -m sweep.cli.validate \
  --set heldout_moe --results-dir "$F" --out "$OUT/heldout/run" > "$OUT/heldout/validate.log" 2>&1
echo "validate rc=$?"; tail -n 30 "$OUT/heldout/validate.log"
cp "$F"/ceilings/*.json "$OUT/heldout/run/" 2>/dev/null
(cd "$OUT" && tar czf heldout.tgz --remove-files heldout)
echo "call wall_s=$(( $(date +%s) - t0 ))"
