#!/usr/bin/env bash
# One call: the fixed costs (the calibration's `launch` family) measured on this machine because
# its boot differs from the shipped file's, judged by the held-out set's four eager pairs (the
# host-bound ones), then the main job's gate with every cache removed (its first run measures
# the fixed costs too: its wall says what that costs). The host's identity with its boot
# (`host_id`) was measured and not kept: apply it first, `git apply
# results/reference/heldout_h100/2026-12-07-s34/host_id.patch` (heldout_h100.md, thirty-fourth
# session); on main the shipped fixed costs serve every machine named `vm`.
# DEADLINE_S: seconds this script may take in all (the gate is cut to what is left).
#   OUT=$OUT DEADLINE_S=540 bash bench/reference/run_host_costs.sh   # $OUT/all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s)
OUT=${OUT:-out}; mkdir -p "$OUT/eager" "$OUT/gate"
. bench/reference/gpu_host.sh
{ grep -m1 "model name" /proc/cpuinfo; nproc; cat /proc/sys/kernel/random/boot_id; hostname
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$OUT/host.txt"
NAMES="l1b_torch_eager_b1 l1b_triton_eager_b8 l8b_torch_eager_b1 mis_torch_eager_b4" \
  VALIDATE_TIMEOUT=${EAGER_TIMEOUT:-220} OUT=$OUT/eager bash bench/reference/run_heldout.sh \
  > "$OUT/eager/call.log" 2>&1
echo "eager rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 12 "$OUT/eager/call.log"
left=$(( ${DEADLINE_S:-540} - ($(date +%s) - t0) - 20 ))
if [ "$left" -gt 60 ]; then
  OUT=$OUT/gate timeout "$left" bash bench/main_job_gate.sh > "$OUT/gate/call.log" 2>&1
  echo "gate rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 6 "$OUT/gate/call.log"
else
  echo "gate: not run ($left s left)"
fi
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
