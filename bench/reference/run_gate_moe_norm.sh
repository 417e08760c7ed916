#!/usr/bin/env bash
# One call: the main job's regression gate on the tree as it is (GATE_ONLY run_reship_gate.sh),
# then, on a copy of the tree with the FFN-norm-in-router patch applied (issue 38 item 2's fourth
# lever, results/reference/moe_h100/2026-11-28-b1_levers_h200/ffn_norm_in_router/moe_norm.patch),
# the MoE kernels' GPU tests and the decode-step probe with the levers alternating.
#   OUT=DIR bash bench/reference/run_gate_moe_norm.sh   # $OUT/gate/all.tgz, $OUT/moe_norm/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT/gate" "$OUT/moe_norm"
GATE_ONLY=1 OUT=$OUT/gate bash bench/reference/run_reship_gate.sh
W=/tmp/moe_norm_tree; rm -rf "$W"; mkdir -p "$W"; cp -a . "$W/"; rm -rf "$W"/results/gqa_vs_mha-*
cd "$W" && patch -p1 -s < results/reference/moe_h100/2026-11-28-b1_levers_h200/ffn_norm_in_router/moe_norm.patch \
  || { echo "patch failed"; exit 1; }
. bench/reference/gpu_host.sh; export PYTHONPATH=/tmp/site:$W
gpu_card "$OUT/moe_norm/card.txt"
timeout "${TEST_TIMEOUT:-90}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_gemm.py \
  tests/kernels/test_model_triton.py -k "moe or router or slots or graph or bf16" > "$OUT/moe_norm/tests.txt" 2>&1
echo "tests rc=$?" | tee -a "$OUT/moe_norm/tests.txt"; tail -n 2 "$OUT/moe_norm/tests.txt"
timeout "${PROBE_TIMEOUT:-200}" python3 -m bench.moe_step_probe "$OUT/moe_norm/moe_step_probe.csv" \
  > "$OUT/moe_norm/moe_step_probe.log" 2>&1; echo "probe rc=$?"; grep "^{" "$OUT/moe_norm/moe_step_probe.log"
