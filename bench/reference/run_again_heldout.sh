#!/usr/bin/env bash
# One call: the calibration families AGAIN (default gemv) timed again entry by entry and shipped
# into this copy of the tree (run_fresh.sh calibrate_more: python -m sweep.cli.calibrate --again
# ... --ship), then a half of the held-out set (HALF, default even) measured and priced on them
# (run_heldout.sh), in what is left of the call.
#   OUT=$OUT bash bench/reference/run_again_heldout.sh     # $OUT/all.tgz: again/, heldout/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/again" "$OUT/heldout"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
AGAIN=${AGAIN:-gemv} CAL_TIMEOUT=${CAL_TIMEOUT:-240} OUT=$OUT/again \
  bash bench/reference/run_fresh.sh calibrate_more | grep -v "^\s*$" | tail -n 4
slug=$(python3 -c "import torch; from kernels.tuning import slug; print(slug(torch.cuda.get_device_name()))")
mkdir -p "$OUT/again/shipped" && cp "sweep/analysis/calibrations/$slug".* "$OUT/again/shipped/"
HALF=${HALF:-even} VALIDATE_TIMEOUT=${VALIDATE_TIMEOUT:-300} OUT=$OUT/heldout \
  bash bench/reference/run_heldout.sh > "$OUT/heldout/call.log" 2>&1
echo "heldout rc=$?"; tail -n 14 "$OUT/heldout/call.log" | cut -c1-400
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
