#!/usr/bin/env bash
# One H100 call: the frozen set heldout_moe_routing (conf/validation/heldout_moe_routing.yaml,
# committed before this script first ran) measured and priced in an empty results directory (its
# own ceilings; the calibration's missing entries measured first), to judge on pairs it was not
# built from the pricing of an MoE stage over the experts the trial measured its tokens reached.
#   OUT=DIR bash bench/reference/run_heldout_routing.sh      # $OUT/routing.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT/routing"
t0=$(date +%s)
. bench/reference/gpu_host.sh
gpu_card "$OUT/routing/card.txt"
F=$(mktemp -d)
timeout "${VALIDATE_TIMEOUT:-570}" python3 -m sweep.cli.validate --set heldout_moe_routing \
  --results-dir "$F" --out "$OUT/routing/run" > "$OUT/routing/validate.log" 2>&1
echo "validate rc=$?"; tail -n 40 "$OUT/routing/validate.log"
cp "$F"/ceilings/*.json "$OUT/routing/run/" 2>/dev/null
(cd "$OUT" && tar czf routing.tgz --remove-files routing)
echo "call wall_s=$(( $(date +%s) - t0 ))"
