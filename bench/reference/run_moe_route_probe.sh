#!/usr/bin/env bash
# The MoE router's GEMM and route_align in one launch (kernels.moe_gemm.router_route) against the
# step's two launches, on this GPU: its GPU tests, then bench.moe_route_probe's table.
#   bash bench/reference/run_moe_route_probe.sh        (outputs to $OUT or ./out)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_gemm.py \
  > "$OUT/tests.txt" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.txt"; tail -n 3 "$OUT/tests.txt"
timeout "${PROBE_TIMEOUT:-240}" python3 -m bench.moe_route_probe "$OUT/moe_route_probe.csv" 2>&1 \
  | tee "$OUT/probe.log" | tail -n 30
