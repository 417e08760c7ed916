#!/usr/bin/env bash
# Issue 38 item 2 on the tree as it is: the MoE decode kernels under programmatic dependent launch
# (kernels.moe_gemm.MOE_PDL) and a long prompt's routing over more programs
# (kernels.moe_align.route_rows_block). Their GPU tests (the MoE kernels and the MoE designs'
# Triton path against torch's), bench.moe_route_rows_probe (route_rows over its tiles, with and
# without a routing skew's draw), bench.moe_step_probe's pdl set (the batch-1 and -8 steps with
# the MoE kernels' PDL on and off), then run_moe_routing.sh's four rows (EXTRA as there).
#   OUT=DIR bash bench/reference/run_moe_pdl.sh     # $OUT/all.tgz: tests, probes, rows/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_gemm.py \
  tests/kernels/test_model_triton.py -k "moe or router or slots or graph or bf16 or pdl or route" \
  > "$OUT/tests.txt" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.txt"; tail -n 2 "$OUT/tests.txt"
timeout "${ROWS_PROBE_TIMEOUT:-150}" python3 -m bench.moe_route_rows_probe "$OUT/route_rows.csv" \
  > "$OUT/route_rows.log" 2>&1; echo "route_rows probe rc=$?"
timeout "${PROBE_TIMEOUT:-150}" python3 -m bench.moe_step_probe "$OUT/moe_step_pdl.csv" "${DESIGNS:-}" pdl \
  > "$OUT/moe_step_pdl.log" 2>&1; echo "step probe rc=$?"; grep "^{" "$OUT/moe_step_pdl.log"
SKIP_TESTS=1 OUT=$OUT/rows bash bench/reference/run_moe_routing.sh
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
