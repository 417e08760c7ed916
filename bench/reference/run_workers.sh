#!/usr/bin/env bash
# Reference run for the studies-at-scale issue, must-show 2 (a machine with two GPUs):
#   bash bench/reference/run_workers.sh one   # the study with one worker (GPU 0)
#   bash bench/reference/run_workers.sh two   # the same designs, 2 workers, one per GPU
#   bash bench/reference/run_workers.sh check # trial rate, integrity, isolation, agreement
# 12 designs: n_kv_heads (6 divisors) x kv_dtype (bf16, int8), Llama-3.2-1B shape, Triton kernels.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-results/out}
mkdir -p "$OUT"
. bench/reference/gpu_host.sh
R=results/ref-workers
space="+experiment.space.kv_dtype.choices=[bf16,int8]"
common="+experiment=gqa_vs_mha model.kernels=triton $space workload.repeats=3 workload.warmup=1 results_dir=$R"
case $1 in
  one)
    rm -rf $R; mkdir -p $R
    python3 -m sweep.caches.ceiling_cache >/dev/null 2>&1 || true  # ceilings cached once, for both runs
    CUDA_VISIBLE_DEVICES=0 python3 -m sweep $common study.name=workers1 ;;
  two)
    python3 -m sweep $common study.name=workers2 sweep.workers=2 ;;
  check)
    python3 -m sweep.cli.workers_check $R/workers1 $R/workers2 --out "$OUT/workers_check.json"
    python3 -m sweep.cli.record "$OUT/workers_h200x2.json" \
      --command "bash bench/reference/run_workers.sh one; ... two; ... check" \
      $R/workers1 $R/workers2
    cp $R/workers2/worker0.log $R/workers2/worker1.log "$OUT/" ;;
esac
