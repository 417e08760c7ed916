#!/usr/bin/env bash
# An MoE experiment measured twice on one machine, under the workload's routing as the experiment
# gives it (moe_vs_dense / moe_granularity: workload.routing=uniform, a trained router's spread)
# and under the random router as built (workload.routing=router): how far the random router's
# collapse moves each design's prefill and the front. One results directory, so the calibration
# entries the first study lacks are measured once; each study cut off after STUDY_TIMEOUT s
# (default 280; a cut study keeps its finished designs). EXP: the experiment (moe_vs_dense);
# ROUTER=0 skips the second study.
#   OUT=DIR bash bench/reference/run_moe_fronts.sh   # $OUT/all.tgz: <study>/{trials.csv,report.html,study.json,console.log}
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
EXP=${EXP:-moe_vs_dense}
R=$OUT/runs
study() {  # study TAG OVERRIDES...
  local tag=$1; shift
  mkdir -p "$OUT/$tag"; local t0; t0=$(date +%s)
  timeout "${STUDY_TIMEOUT:-280}" python3 -m sweep +experiment="$EXP" results_dir="$R" "$@" \
    > "$OUT/$tag/console.log" 2>&1
  echo "$tag rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee "$OUT/$tag/walls.txt"
  local d; d=$(ls -dt "$R/$EXP"-* 2>/dev/null | head -n 1)
  [ -n "$d" ] && cp "$d"/{trials.csv,report.html,study.json} "$OUT/$tag/" 2>/dev/null
  grep -E "^\[|calibration|COMPLETE|FAIL" "$OUT/$tag/console.log" | cut -c1-200 | tail -n 14
}
study "${EXP}_uniform"
[ "${ROUTER:-1}" != 0 ] && study "${EXP}_router" workload.routing=router
cp -r "$R/calibration" "$OUT/calibration" 2>/dev/null
rm -rf "$R"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
