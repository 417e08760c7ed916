#!/usr/bin/env bash
# Decode attention's instruction cuts (decode_levers_h100.md section 18), measured and, if they
# pay, shipped, in one call: the A/B (run_attn_ab.sh: the tree's kernel, trims.patch, trims.patch
# + i8_f16.patch), the pick (bench.attn_ab_pick), then the chosen side's land patch applied and
# the stale decode-attention family measured and shipped in the time left (RESHIP_ONLY: the gate
# is the next call, on the committed files).
#   OUT=out bash bench/reference/run_attn_ab_ship.sh   # $OUT: ab/, pick.txt, landed.txt, reship/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/ab"
D=results/reference/decode_levers_h100/s30_trims
PATCH=$D/trims.patch PATCH2=$D/i8_f16.patch NO_TAR=1 AB_TIMEOUT=${AB_TIMEOUT:-70} OUT=$OUT/ab \
  bash bench/reference/run_attn_ab.sh
side=$(python3 -m bench.attn_ab_pick "$OUT/ab" | tee "$OUT/pick.txt" | tail -n 1)
case $side in new) land=$D/trims_land.patch ;; both) land=$D/trims_i8_land.patch ;; *) land= ;; esac
echo "picked: ${side:-none} ${land:-(nothing shipped)}"
if [ -n "$land" ] && git apply "$land"; then
  echo "$land" > "$OUT/landed.txt"
  RESHIP_ONLY=1 NO_GEMV=1 CAL_TIMEOUT=$(( ${BUDGET:-540} - SECONDS )) OUT=$OUT/reship \
    bash bench/reference/run_reship_gate.sh
fi
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
