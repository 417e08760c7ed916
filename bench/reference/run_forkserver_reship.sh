#!/usr/bin/env bash
# One call: the fork server checked on this GPU (bench/reference/forkserver_check.py: the ceilings
# child forked, then started as a new interpreter), then run_reship_gate.sh (its RESHIP_ONLY /
# GATE_ONLY / NO_GEMV / CAL_TIMEOUT as given), whose calibration, ceilings and trial children the
# fork server starts. Should the forked child fail here, this copy of the tree turns the fork
# server off (forkable() False) before the reship, so the call still reships; the check's line
# says which.   OUT=$OUT bash bench/reference/run_forkserver_reship.sh   ($OUT: fork/, all.tgz)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/fork"
. bench/reference/gpu_host.sh
timeout 200 python3 bench/reference/forkserver_check.py "$OUT/fork" | tee "$OUT/fork/check.json"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  echo "fork server check failed: turned off in this copy" | tee -a "$OUT/fork/check.json"
  sed -i 's/    return (sys.platform.startswith("linux") and len(cmd) >= 3/    return False and (len(cmd) >= 3/' \
    sweep/measure/forked.py
fi
(cd "$OUT" && tar czf fork.tgz --remove-files fork)
OUT=$OUT bash bench/reference/run_reship_gate.sh
