#!/usr/bin/env bash
# One call: bench/qk8_probe.py (decode attention over a one-byte cache with q, and p, quantized
# per row so the products run on the one-byte operands, against the shipped kernel, per tile;
# issue 34 item 4), cut off after QK8_TIMEOUT s.   OUT=$OUT bash bench/reference/run_qk8.sh
# ($OUT: all.tgz of qk8.tgz: qk8.csv, console.log, device.txt, walls.txt)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
probe qk8 "${QK8_TIMEOUT:-420}" bench.qk8_probe
grep -E "^BEST|^copy|Error" "$OUT/qk8/console.log" | cut -c1-400 | head -n 30
probe_pack qk8
(cd "$OUT" && tar czf all.tgz --remove-files qk8.tgz)
