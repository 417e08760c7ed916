#!/usr/bin/env bash
# Reference run for the profiling issue: profile=ncu on the Llama-3.2-1B shape (batch 1, prompt
# 512) and a few gqa_vs_mha designs at the same workload; raw ncu CSVs of the base design kept.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-results/out}
mkdir -p "$OUT"
R=results/ref-ncu
rm -rf "$R"
. bench/reference/gpu_host.sh
timeout 420 python3 -m sweep model=llama3_2_1b profile=ncu study.n_trials=1 results_dir=$R
cp $R/baseline-*/trials/0000/ncu_decode/ncu.csv "$OUT/ncu_decode_llama3_2_1b_b1.csv"
cp $R/baseline-*/trials/0000/ncu_prefill/ncu.csv "$OUT/ncu_prefill_llama3_2_1b_b1.csv"
python3 -m sweep.cli.record "$OUT/ncu.json" --command "bash bench/reference/run_ncu.sh" \
  $R/baseline-*
