#!/usr/bin/env bash
# The main job's gate on this tree (every cache removed: bench/main_job_gate.sh; GATE=0 skips
# it), then each named experiment measured on the same machine, in order, on the caches the gate
# left: python -m sweep +experiment=NAME, each cut off after STUDY_TIMEOUT s (default 330; a
# study cut off keeps its finished designs and goes on from them when run again).
#   bash bench/reference/run_gate_study.sh attention_kind    # $OUT: gate/, attention_kind/, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/gate"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
if [ "${GATE:-1}" != 0 ]; then
  OUT=$OUT/gate bash bench/main_job_gate.sh > "$OUT/gate/console.txt" 2>&1; echo "gate rc=$?" | tee "$OUT/gate/rc.txt"
  tail -n 4 "$OUT/gate/console.txt"
fi
for name in "$@"; do
  mkdir -p "$OUT/$name"; t0=$(date +%s)
  timeout "${STUDY_TIMEOUT:-330}" python3 -m sweep +experiment="$name" > "$OUT/$name/console.log" 2>&1
  echo "$name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee "$OUT/$name/walls.txt"
  d=$(ls -dt results/"$name"-* 2>/dev/null | head -n 1)
  [ -n "$d" ] && cp "$d"/{trials.csv,report.html,pareto.png,study.json} "$OUT/$name/" 2>/dev/null
  grep -E "^\[|calibration" "$OUT/$name/console.log" | cut -c1-220
done
