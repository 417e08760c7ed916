#!/usr/bin/env bash
# Issue 38 item 2's two batch-1 levers in the model (kernels.moe_route.router_route, the slots'
# sum inside moe_down): their GPU tests, the decode step with each on and off
# (bench.moe_step_probe), then the batch-1 rows and kernels with both on (run_moe_b1_modules.sh).
#   OUT=DIR bash bench/reference/run_moe_b1_levers.sh    # $OUT/all.tgz: tests, probe, modules/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout "${TEST_TIMEOUT:-100}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_gemm.py \
  tests/kernels/test_model_triton.py -k "moe or router or slots or graph or bf16" > "$OUT/tests.txt" 2>&1
echo "tests rc=$?" | tee -a "$OUT/tests.txt"; tail -n 2 "$OUT/tests.txt"
timeout "${PROBE_TIMEOUT:-180}" python3 -m bench.moe_step_probe "$OUT/moe_step_probe.csv" ${DESIGNS:-} \
  > "$OUT/moe_step_probe.log" 2>&1; echo "probe rc=$?"; grep "^{" "$OUT/moe_step_probe.log"
OUT=$OUT/modules STUDY_TIMEOUT=${STUDY_TIMEOUT:-140} bash bench/reference/run_moe_b1_modules.sh
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
