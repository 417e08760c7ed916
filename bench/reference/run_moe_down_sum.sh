#!/usr/bin/env bash
# Issue 38's batch-1 lever, probed: the MoE down projection with the slots' sum in one launch
# (kernels.moe_down_sum): its GPU test, then bench.moe_down_sum_probe.
#   bash bench/reference/run_moe_down_sum.sh      # $OUT: card.txt, tests, the CSV and log, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_down_sum.py > "$OUT/gpu_tests.txt" 2>&1
echo "tests rc=$?"; tail -n 1 "$OUT/gpu_tests.txt"
timeout ${PROBE_TIMEOUT:-200} python3 -m bench.moe_down_sum_probe "$OUT/moe_down_sum.csv" ${DESIGNS:-} \
  > "$OUT/moe_down_sum.log" 2>&1
echo "probe rc=$?"; grep "^{" "$OUT/moe_down_sum.log"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
