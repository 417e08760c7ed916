#!/usr/bin/env bash
# One call on a fresh machine: the fixed costs (the calibration's `launch` group) read cold,
# again, and after a load (python -m bench.fixed_costs_probe), then the held-out set's four eager
# pairs on the shipped costs: whether the reading taken first thing on a fresh machine is the
# host's speed as its trials meet it (heldout_h100.md, thirty-fourth session: it was not).
#   OUT=$OUT bash bench/reference/run_fixed_costs_probe.sh     # $OUT/all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/probe" "$OUT/eager"
. bench/reference/gpu_host.sh
{ grep -m1 "model name" /proc/cpuinfo; nproc; hostname; date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/host.txt"
timeout 300 python3 -m bench.fixed_costs_probe "$OUT/probe" "${LOAD_S:-20}" 2>&1 | tee "$OUT/probe/log.txt"
NAMES="l1b_torch_eager_b1 l1b_triton_eager_b8 l8b_torch_eager_b1 mis_torch_eager_b4" \
  VALIDATE_TIMEOUT=${EAGER_TIMEOUT:-220} OUT=$OUT/eager bash bench/reference/run_heldout.sh \
  > "$OUT/eager/call.log" 2>&1
echo "eager rc=$?"; tail -n 12 "$OUT/eager/call.log"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
