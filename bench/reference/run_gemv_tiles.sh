#!/usr/bin/env bash
# Issue 34's next lever, probed: the dot-path GEMV with wider grids, timed cold (bench.gemv_tiles_probe).
#   bash bench/reference/run_gemv_tiles.sh       # $OUT: card.txt, gemv_tiles.csv, the log, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout ${PROBE_TIMEOUT:-300} python3 -m bench.gemv_tiles_probe "$OUT/gemv_tiles.csv" > "$OUT/gemv_tiles.log" 2>&1
echo "probe rc=$?"; grep -o "'shape': '[a-z0-9_]*'\|'shipped_us': [0-9.]*\|'best': '[a-z0-9_]*', 'best_us': [0-9.]*" "$OUT/gemv_tiles.log"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
