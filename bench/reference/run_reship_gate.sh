#!/usr/bin/env bash
# One call after a decode-kernel change, for a GPU whose shipped files are stale: the reship
# (run_session_reship.sh: kernel tests, tile check, the stale calibration families measured again
# and shipped into the tree) and then, on those shipped files, the main job's regression gate
# with every cache removed (bench/main_job_gate.sh). On a card whose files are current, give
# GATE_ONLY=1 to run the gate alone.
#   CAL_TIMEOUT=300 bash bench/reference/run_reship_gate.sh     # $OUT: reship/, gate/ and all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/reship" "$OUT/gate"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
if [ -z "${GATE_ONLY:-}" ]; then
  OUT=$OUT/reship bash bench/reference/run_session_reship.sh
fi
OUT=$OUT/gate bash bench/main_job_gate.sh; echo "gate rc=$?" | tee "$OUT/gate/rc.txt"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
