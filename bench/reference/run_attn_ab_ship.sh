#!/usr/bin/env bash
# Decode attention's instruction cuts (decode_levers_h100.md section 18), measured and, if one
# pays, shipped, in one call: the A/B of the three land patches against the tree's kernel
# (run_attn_ab.sh), the pick (bench.attn_ab_pick), then the chosen patch applied and the stale
# decode-attention family measured and shipped in the time left (RESHIP_ONLY: the gate is the
# next call, on the committed files).
#   OUT=out bash bench/reference/run_attn_ab_ship.sh   # $OUT: ab/ (pick.txt), landed.txt, reship/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/ab"
D=results/reference/decode_levers_h100/s30_trims
declare -A LAND=([new]=$D/trims_land.patch [both]=$D/trims_i8_land.patch [v16]=$D/trims_v16_land.patch)
SIDES="new:${LAND[new]} both:${LAND[both]} v16:${LAND[v16]}" NO_TAR=1 AB_TIMEOUT=${AB_TIMEOUT:-60} \
  OUT=$OUT/ab bash bench/reference/run_attn_ab.sh
side=$(tail -n 1 "$OUT/ab/pick.txt" 2>/dev/null)
land=${side:+${LAND[$side]:-}}
echo "picked: ${side:-none} ${land:-(nothing shipped)}"
if [ -n "$land" ] && git apply "$land"; then
  echo "$land" > "$OUT/landed.txt"
  RESHIP_ONLY=1 NO_GEMV=1 CAL_TIMEOUT=$(( ${BUDGET:-540} - SECONDS )) OUT=$OUT/reship \
    bash bench/reference/run_reship_gate.sh
fi
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
