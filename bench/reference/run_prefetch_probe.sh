#!/usr/bin/env bash
# Issue 34: a weight pulled into L2 while decode attention (latency-bound) leaves DRAM idle:
# the prefetch launch's GPU tests, then bench.l2_prefetch_probe over the main job's designs and
# the bench's shapes (nothing shipped changes; the variants are patched in by the probe).
#   bash bench/reference/run_prefetch_probe.sh      # $OUT: card.txt, tests, the CSV and log, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout 120 python3 -m pytest -q -m gpu tests/kernels/test_l2_prefetch.py > "$OUT/gpu_tests.txt" 2>&1
echo "tests rc=$?"; tail -n 2 "$OUT/gpu_tests.txt"
timeout ${PROBE_TIMEOUT:-440} python3 -m bench.l2_prefetch_probe "$OUT/prefetch.csv" ${ROUNDS:-3} \
  > "$OUT/prefetch.log" 2>&1
echo "probe rc=$?"; grep -v '^\s*$' "$OUT/prefetch.log" | tail -n 12
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
