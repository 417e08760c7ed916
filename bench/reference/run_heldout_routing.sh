#!/usr/bin/env bash
# One H100 call: the frozen MoE sets (default heldout_moe, then heldout_moe_routing, whose file
# was committed before it was first measured) measured and priced in one empty results directory
# (its own ceilings, measured once; the calibration's missing entries measured first), to judge
# the pricing of an MoE stage on the routing the trial measured (the experts its tokens reached,
# each with its rows) on heldout_moe and on pairs it was not built from.
#   OUT=DIR [SETS="heldout_moe_routing"] bash bench/reference/run_heldout_routing.sh  # $OUT/routing.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT/routing"
t0=$(date +%s)
. bench/reference/gpu_host.sh
gpu_card "$OUT/routing/card.txt"
F=$(mktemp -d)
for s in ${SETS:-heldout_moe heldout_moe_routing}; do
  left=$(( 580 - ($(date +%s) - t0) )); [ "$left" -gt 10 ] || break
  timeout "$left" python3 -m sweep.cli.validate --set "$s" \
    --results-dir "$F" --out "$OUT/routing/$s" > "$OUT/routing/$s.log" 2>&1
  echo "$s rc=$? wall_s=$(( $(date +%s) - t0 ))"; grep -A8 "^| stage" "$OUT/routing/$s.log"
done
cp "$F"/ceilings/*.json "$OUT/routing/" 2>/dev/null
(cd "$OUT" && tar czf routing.tgz --remove-files routing)
echo "call wall_s=$(( $(date +%s) - t0 ))"
