#!/usr/bin/env bash
# QK-norm in one launch (kernels.qk_norm) on this GPU: its tests and the QK-norm designs' Triton
# path against the torch path, then the MoE decode step with each lever on and off
# (bench.moe_step_probe) and the OLMoE-1B-7B batch-1 row (run_moe_b1_modules.sh).
#   OUT=DIR bash bench/reference/run_moe_qk_norm.sh     # $OUT/all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout "${TEST_TIMEOUT:-80}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_qk_norm.py \
  tests/kernels/test_model_triton.py -k "test_qk_norm or qk_norm_head or moe_qk_norm_full or reference" \
  > "$OUT/tests.txt" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.txt"; tail -n 2 "$OUT/tests.txt"
timeout "${PROBE_TIMEOUT:-130}" python3 -m bench.moe_step_probe "$OUT/moe_step_probe.csv" ${DESIGNS:-} \
  > "$OUT/moe_step_probe.log" 2>&1; echo "probe rc=$?"; grep "^{" "$OUT/moe_step_probe.log"
OUT=$OUT/modules MODELS=${MODELS:-olmoe_1b_7b} STUDY_TIMEOUT=${STUDY_TIMEOUT:-80} \
  bash bench/reference/run_moe_b1_modules.sh
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
