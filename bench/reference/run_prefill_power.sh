#!/usr/bin/env bash
# One call: bench/reference/power_probe.py on MoE prefills outside the frozen sets (SM clock,
# board power and each prefill's time, back to back and 1.5 s apart), beside the development
# set's 1B prefill: does an MoE prefill reach the power limit? (issue 38 item 4)
#   OUT=DIR bash bench/reference/run_prefill_power.sh   # $OUT/power_probe.json, probe.log
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
SKIP_GEMM=1 PREFILLS=${PREFILLS:-l1b_b8_p4096:llama3_2_1b:8:4096,olmoe_b8_p1024:olmoe_1b_7b:8:1024,qwen3moe_b16_p512:qwen3_30b_a3b:16:512} \
  OUT=$OUT timeout "${PROBE_TIMEOUT:-300}" python3 bench/reference/power_probe.py > "$OUT/probe.log" 2>&1
echo "probe rc=$?"; tail -n 12 "$OUT/probe.log"
gzip -f "$OUT/power_probe.json"
