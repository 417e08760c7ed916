#!/usr/bin/env bash
# Kernel changes to decode attention against the tree's kernel, on one machine, in one call:
# bench.attn_ab_probe with the tree's code ("base") and with each side's patches applied (then
# reverted), two rounds in turn, then the medians per shape and tile and the side that pays
# (bench.attn_ab_pick, also in $OUT/pick.txt).
#   SIDES="new:a.patch both:a.patch,b.patch" OUT=out bash bench/reference/run_attn_ab.sh
# SIDES: "name:patch[,patch...]" a side (its patches applied in order); ROUNDS: how many turns
# (default 2; 1 when little device time is left); NO_TAR=1: $OUT left untarred, for a script that
# reads it after (run_attn_ab_ship.sh).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
: "${SIDES:?SIDES: the changes to measure, name:patch[,patch...] each}"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
for rnd in $(seq 1 "${ROUNDS:-2}"); do
  for spec in base: $SIDES; do
    side=${spec%%:*}; IFS=, read -ra ps <<< "${spec#*:}"
    for p in "${ps[@]}"; do git apply "$p" || exit 1; done
    timeout ${AB_TIMEOUT:-100} python3 -m bench.attn_ab_probe "$OUT" "${side}_$rnd" >> "$OUT/probe.log" 2>&1
    echo "${side}_$rnd rc=$?"
    for ((i = ${#ps[@]} - 1; i >= 0; i--)); do git apply -R "${ps[i]}"; done
  done
done
python3 -m bench.attn_ab_pick "$OUT" | tee "$OUT/pick.txt"
[ -n "${NO_TAR:-}" ] || (cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
