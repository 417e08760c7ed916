#!/usr/bin/env bash
# Issue 34's decode levers, probed on one GPU before any is shipped: decode attention's 16-bit
# partials, PDL merge launch and split plan per group size (bench.attention_probe levers), and
# every decode linear of the main job on the Triton GEMV and cuBLAS, warm and cold, with the
# GEMV's tiles tuned warm (shipped) and cold (bench.linear_choice_probe).
#   bash bench/reference/run_levers_probe.sh        # $OUT: card.txt, the CSVs and logs, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout 200 python3 -m bench.attention_probe levers "$OUT/attn_levers.csv" > "$OUT/attn_levers.log" 2>&1
echo "attention rc=$?"; tail -n 3 "$OUT/attn_levers.log"
timeout 200 python3 -m bench.linear_choice_probe "$OUT/linear_choice.csv" > "$OUT/linear_choice.log" 2>&1
echo "linear rc=$?"; tail -n 2 "$OUT/linear_choice.log"
timeout 150 python3 -m bench.linear_choice_probe "$OUT/linear_choice_cold_tune.csv" --cold-tune \
  > "$OUT/linear_choice_cold_tune.log" 2>&1
echo "linear cold-tune rc=$?"; tail -n 2 "$OUT/linear_choice_cold_tune.log"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
