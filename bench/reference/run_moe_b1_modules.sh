#!/usr/bin/env bash
# Issue 38 item 2's diagnosis: where a batch-1 MoE decode step's time goes, kernel by kernel inside
# its CUDA graph (`profile=modules`: torch.profiler over one eager step and one graph replay,
# each trial's kernels_decode.json), for the OLMoE-1B-7B and Qwen3-30B-A3B presets at batch 1,
# prompt 512 (random weights, kernels=triton, mode=cudagraph).
#   OUT=DIR bash bench/reference/run_moe_b1_modules.sh      # $OUT/<model>/: trials.csv, kernels, logs
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
for m in ${MODELS:-olmoe_1b_7b qwen3_30b_a3b}; do
  mkdir -p "$OUT/$m"
  timeout "${STUDY_TIMEOUT:-220}" python3 -m sweep model=$m workload.batch=1 workload.prompt_len=512 \
    workload.new_tokens=64 profile=modules study.name=moe_b1_$m results_dir="$OUT/run_$m" \
    > "$OUT/$m/console.log" 2>&1
  echo "$m rc=$?" | tee -a "$OUT/$m/console.log"; grep -E "decode [0-9]" "$OUT/$m/console.log" | tail -n 1
  d=$(ls -d "$OUT"/run_$m/moe_b1_$m* 2>/dev/null | head -n 1)
  [ -n "$d" ] && cp "$d/trials.csv" "$OUT/$m/" && cp "$d"/trials/*/modules/kernels_decode.json "$OUT/$m/" 2>/dev/null
  rm -rf "$OUT/run_$m"
done
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
