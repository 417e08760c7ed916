#!/usr/bin/env bash
# Issue 34: the dot-path GEMV's activation tiles loaded a step ahead (PREFETCH_X on the shipped
# tiles; nothing shipped changes): bench.gemv_px_probe, per kernel and per decode step.
#   OUT=out bash bench/reference/run_gemv_px.sh   # $OUT: card.txt, kernels.csv, step.csv, px.log, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout ${PROBE_TIMEOUT:-540} python3 -m bench.gemv_px_probe "$OUT" ${ROUNDS:-3} > "$OUT/px.log" 2>&1
echo "probe rc=$?"; grep -v '^\s*$' "$OUT/px.log" | tail -n 12 | cut -c1-600
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
