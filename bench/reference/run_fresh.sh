#!/usr/bin/env bash
# A new user's first GPU run (issue 22), and the calibration shipped with the package.
#   bash bench/reference/run_fresh.sh calibrate   # measure the shipped grid with today's
#       kernels from nothing (no calibration, tuning or Triton cache) and ship it
#       (sweep/analysis/calibrations/, kernels/tuned/): python -m sweep.cli.calibrate --refresh --ship;
#       cut off after CAL_TIMEOUT s (default 480) it keeps what it finished, copied to $OUT
#   bash bench/reference/run_fresh.sh calibrate_more  # the same from the shipped files (the
#       rest of a calibration cut off before): python -m sweep.cli.calibrate --ship (AGAIN=gemv:
#       with --again gemv, every GEMV entry timed again)
#   bash bench/reference/run_fresh.sh fresh       # remove every cache (results/calibration,
#       results/ceilings, results/tuning, Triton's), then the README's main job with no
#       overrides, timed; then the first minute of +experiment=attention_shape and of
#       +experiment=design_space study.predict=true hardware=h100_sxm on the same fresh caches
#   bash bench/reference/run_fresh.sh warm        # the main job again on warm caches
# Output under $OUT (or ./out): each command's console log and the wall times.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv | tee -a "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
clean() { rm -rf results/calibration results/ceilings results/tuning "${TRITON_CACHE_DIR:-$HOME/.triton/cache}" "$HOME/.triton"; }
timed() {  # name, command...: console log to $OUT/name.log, wall time appended to $OUT/walls.txt
  local name=$1; shift; local t0; t0=$(date +%s%N)
  "$@" 2>&1 | tee "$OUT/$name.log"; local rc=${PIPESTATUS[0]}
  echo "$name rc=$rc wall_s=$(( ($(date +%s%N) - t0) / 1000000 ))e-3" | tee -a "$OUT/walls.txt"
}
for what in "$@"; do
  case $what in
    calibrate|calibrate_more)
      clean
      [ "$what" = calibrate ] && refresh=--refresh || refresh=
      timed "$what" python3 -m sweep.cli.calibrate $refresh ${AGAIN:+--again $AGAIN} --ship \
        --timeout "${CAL_TIMEOUT:-480}"
      cp results/calibration/*.json results/calibration/*.parquet "$OUT/" 2>/dev/null
      for f in results/tuning/*.json; do cp "$f" "$OUT/tuning_$(basename "$f")"; done
      cat results/calibration/.*.log > "$OUT/${what}_child.log" 2>/dev/null ;;
    fresh|fresh_main)
      clean
      rm -rf results/gqa_vs_mha-* results/optuna.db  # a study of an earlier call would skip its designs
      timed fresh_main timeout "${MAIN_TIMEOUT:-400}" python3 -m sweep +experiment=gqa_vs_mha
      cp results/gqa_vs_mha-*/trials.csv "$OUT/fresh_main_trials.csv" 2>/dev/null
      grep -h "calibration:" "$OUT/fresh_main.log" > "$OUT/fresh_main_calibration.txt" 2>/dev/null
      for f in results/tuning/*.json; do cp "$f" "$OUT/tuning_$(basename "$f")"; done
      [ "$what" = fresh_main ] && continue
      timed fresh_attention_shape timeout 75 python3 -m sweep +experiment=attention_shape
      timed fresh_design_space_predict timeout 75 python3 -m sweep +experiment=design_space \
        study.predict=true hardware=h100_sxm ;;
    fold_ab)  # the MQA design of the main job with RoPE folded into decode attention and not
      for f in true false; do
        timed "mqa_fold_$f" python3 -m sweep +experiment=gqa_vs_mha model.n_kv_heads=1 \
          experiment.space={} study.n_trials=1 switches.rope_in_attention=$f study.name=mqa_fold_$f
      done ;;
    warm)
      rm -rf results/gqa_vs_mha-* results/optuna.db
      timed warm_main python3 -m sweep +experiment=gqa_vs_mha
      cp results/gqa_vs_mha-*/trials.csv "$OUT/warm_main_trials.csv" 2>/dev/null
      for f in results/tuning/*.json; do cp "$f" "$OUT/tuning_$(basename "$f")"; done ;;
  esac
done
