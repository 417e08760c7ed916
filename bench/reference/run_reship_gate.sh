#!/usr/bin/env bash
# One call after a decode-kernel change, for a GPU whose shipped files are stale: the reship
# (run_session_reship.sh: kernel tests, tile check, the stale calibration families measured again
# and shipped into the tree) and then, on those shipped files, the main job's regression gate
# with every cache removed (bench/main_job_gate.sh). On a card whose files are current, give
# GATE_ONLY=1 to run the gate alone, RESHIP_ONLY=1 the reship alone (a calibration too long for
# one call: then calibrate_more and the gate in a second call, on the first one's shipped files).
# A device call returns at most 8 files: this script tars $OUT, so call the reship through it.
#   CAL_TIMEOUT=300 bash bench/reference/run_reship_gate.sh     # $OUT: reship/, gate/ and all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/reship" "$OUT/gate"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
if [ -z "${GATE_ONLY:-}" ]; then
  OUT=$OUT/reship bash bench/reference/run_session_reship.sh
fi
if [ -z "${RESHIP_ONLY:-}" ]; then
  OUT=$OUT/gate bash bench/main_job_gate.sh; echo "gate rc=$?" | tee "$OUT/gate/rc.txt"
fi
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
