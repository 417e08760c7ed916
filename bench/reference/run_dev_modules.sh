#!/usr/bin/env bash
# One call: the development set (conf/validation/development.yaml) measured and priced on this GPU
# (run_heldout.sh with SET=development), then its pairs' steps profiled kernel by kernel
# (modules_probe.py: each graphed step replayed under torch.profiler, every kernel attributed to
# its module), so each module's measured kernel time can be set beside the price the performance
# model gives it (the graphed TPOT over-prediction of heldout_h100.md, thirty-fourth session:
# which kernels are priced slow; any term is fitted here, on the development set, never on the
# held-out one).     OUT=$OUT bash bench/reference/run_dev_modules.sh      # $OUT/all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/dev" "$OUT/modules"
. bench/reference/gpu_host.sh
{ grep -m1 "model name" /proc/cpuinfo; nproc; date -u; git rev-parse HEAD 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > "$OUT/host.txt"
SET=development VALIDATE_TIMEOUT=${DEV_TIMEOUT:-300} OUT=$OUT/dev bash bench/reference/run_heldout.sh \
  > "$OUT/dev/call.log" 2>&1
echo "dev rc=$?"; tail -n 20 "$OUT/dev/call.log"
SET=development timeout "${MOD_TIMEOUT:-240}" python3 bench/reference/modules_probe.py "$OUT/modules" \
  2>&1 | tee "$OUT/modules/log.txt"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
