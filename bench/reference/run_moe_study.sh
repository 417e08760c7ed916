#!/usr/bin/env bash
# The main job's gate on this tree (every cache removed: bench/main_job_gate.sh), then the MoE
# experiment measured on the same machine: python -m sweep +experiment=moe_vs_dense.
#   bash bench/reference/run_moe_study.sh     # $OUT: gate/, moe_vs_dense/ (log, rows, report)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/gate" "$OUT/moe_vs_dense"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
OUT=$OUT/gate bash bench/main_job_gate.sh > "$OUT/gate/console.txt" 2>&1; echo "gate rc=$?" | tee "$OUT/gate/rc.txt"
tail -n 4 "$OUT/gate/console.txt"
t0=$(date +%s)
timeout "${STUDY_TIMEOUT:-330}" python3 -m sweep +experiment=moe_vs_dense > "$OUT/moe_vs_dense/console.log" 2>&1
echo "moe_vs_dense rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee "$OUT/moe_vs_dense/walls.txt"
d=$(ls -dt results/moe_vs_dense-* 2>/dev/null | head -n 1)
[ -n "$d" ] && cp "$d"/{trials.csv,report.html,pareto.png,study.json} "$OUT/moe_vs_dense/" 2>/dev/null
grep -E "^\[|calibration" "$OUT/moe_vs_dense/console.log" | cut -c1-220
