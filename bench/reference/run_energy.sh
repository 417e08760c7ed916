#!/usr/bin/env bash
# Reference run: NVML energy per token through the sweep (profile=nvml) for the GQA study and the
# Llama-3.1-8B shape with Triton kernels; plus the GPU tests touched since the bench run.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-results/out}
mkdir -p "$OUT"
R=results/ref-energy
rm -rf "$R"
. bench/reference/gpu_host.sh
python3 -m pytest -q tests/test_nvml.py tests/test_gpu.py tests/kernels/test_attention.py \
  tests/kernels/test_model_triton.py 2>&1 | tail -8
python3 -m sweep +experiment=gqa_vs_mha profile=nvml results_dir=$R
python3 -m sweep model=llama3_1_8b model.kernels=triton profile=nvml study.n_trials=1 results_dir=$R
python3 -m sweep.cli.record "$OUT/energy.json" --command "bash bench/reference/run_energy.sh" \
  $R/gqa_vs_mha-* $R/baseline-*
cp $R/gqa_vs_mha-*/trials/0000/nvml.csv "$OUT/nvml_gqa_trial0.csv"
