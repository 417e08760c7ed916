#!/usr/bin/env bash
# The batch-1 MoE kernels' tiles, each kernel alone (bench.moe_b1_tiles_probe), on this GPU.
#   OUT=DIR bash bench/reference/run_moe_b1_tiles.sh     # $OUT: card.txt, the table, its log
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout "${PROBE_TIMEOUT:-420}" python3 -m bench.moe_b1_tiles_probe "$OUT/moe_b1_tiles.csv" \
  > "$OUT/moe_b1_tiles.log" 2>&1; echo "probe rc=$?"; tail -n 3 "$OUT/moe_b1_tiles.log"
