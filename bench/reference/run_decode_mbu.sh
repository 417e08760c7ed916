#!/usr/bin/env bash
# Issue 34 item 3: the decode MBU of the shipped experiments' designs on this tree's kernels and
# shipped files: +experiment=head_dim, kv_quant and the first 8 designs of attention_shape, one
# after the other on one machine (the first study's caches serve the rest), each cut off after
# STUDY_TIMEOUT s. Record: results/reference/decode_mbu_h100.md.
#   bash bench/reference/run_decode_mbu.sh        # $OUT: <experiment>.log, <experiment>_trials.csv
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/device.txt"
for run in "head_dim" "kv_quant" "attention_shape study.n_trials=8"; do
  name=${run%% *}; t0=$(date +%s)
  timeout "${STUDY_TIMEOUT:-200}" python3 -m sweep +experiment=$run > "$OUT/$name.log" 2>&1
  echo "$name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a "$OUT/walls.txt"
  d=$(ls -dt results/"$name"-* 2>/dev/null | head -n 1)
  [ -n "$d" ] && cp "$d/trials.csv" "$OUT/${name}_trials.csv"
  grep -E "^\[[0-9]" "$OUT/$name.log" | cut -c1-160
done
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
