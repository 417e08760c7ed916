#!/usr/bin/env bash
# One call: bench/qk8_probe.py (decode attention over a one-byte cache with q, and p, quantized
# per row so the products run on the one-byte operands, against the shipped kernel, per tile;
# issue 34 item 4), cut off after QK8_TIMEOUT s.   OUT=$OUT bash bench/reference/run_qk8.sh
# ($OUT: all.tgz of qk8/: qk8.csv, console.log, device.txt)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/qk8"
. bench/reference/gpu_host.sh
gpu_card "$OUT/qk8/device.txt"
t0=$(date +%s)
timeout "${QK8_TIMEOUT:-420}" python3 -m bench.qk8_probe "$OUT/qk8" > "$OUT/qk8/console.log" 2>&1
echo "qk8 rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee "$OUT/qk8/walls.txt"
grep -E "^BEST|^copy|Error" "$OUT/qk8/console.log" | cut -c1-400 | head -n 30
(cd "$OUT" && tar czf all.tgz --remove-files qk8)
