#!/usr/bin/env bash
# Issue 34: FFN weights pulled into L2 from a parallel branch of the decode step's graph while the
# attention half of each layer (latency-bound at few KV heads) leaves DRAM idle:
# bench.l2_fork_probe over the main job's designs and the bench's shapes (nothing shipped changes).
#   OUT=out bash bench/reference/run_l2_fork_probe.sh   # $OUT: card.txt, fork.csv, fork.log, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout ${PROBE_TIMEOUT:-500} python3 -m bench.l2_fork_probe "$OUT/fork.csv" ${ROUNDS:-3} \
  > "$OUT/fork.log" 2>&1
echo "probe rc=$?"; grep -v '^\s*$' "$OUT/fork.log" | tail -n 12
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
