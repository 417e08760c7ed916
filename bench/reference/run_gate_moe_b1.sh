#!/usr/bin/env bash
# One H100 call: the main job's regression gate on the tree as it is (GATE_ONLY
# run_reship_gate.sh: every cache removed, 0 regressions expected), then issue 38 item 2 on
# today's shipped files: bench.moe_probe (OLMoE-1B-7B and Qwen3-30B-A3B decode at batch 1, 8 and
# 64 against the touched-bytes roofline; one MoE layer against its peers), without the kernel
# tests (run_moe.sh runs them; the kernels have not changed since they last passed on a GPU).
#   OUT=DIR bash bench/reference/run_gate_moe_b1.sh   # $OUT/gate/all.tgz, $OUT/moe.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT/gate" "$OUT/moe"
t0=$(date +%s)
GATE_ONLY=1 OUT=$OUT/gate bash bench/reference/run_reship_gate.sh 2>&1 | grep -v "^\s*$" | tail -n 30
echo "gate wall_s=$(( $(date +%s) - t0 ))"
ls -a results/calibration | tee "$OUT/moe/calibration_ls.txt"
. bench/reference/gpu_host.sh
gpu_card "$OUT/moe/card.txt"
timeout "${PROBE_TIMEOUT:-$(( 570 - ($(date +%s) - t0) ))}" python3 -m bench.moe_probe "$OUT/moe/moe" \
  ${PROBE_ARGS:-} > "$OUT/moe/probe.log" 2>&1; echo "probe rc=$?"; tail -n 30 "$OUT/moe/probe.log"
(cd "$OUT" && tar czf moe.tgz --remove-files moe)
echo "call wall_s=$(( $(date +%s) - t0 ))"
