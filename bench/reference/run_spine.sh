#!/usr/bin/env bash
# Reference run for the spine: gqa_vs_mha on the Llama-3.2-1B shape (batch 8, 4096-token prompt),
# and the Llama-3.1-8B / Llama-3.2-1B shapes at batch 1 (prompt 512, 128 new tokens), cudagraph and
# eager decode. Run from the repository root on a GPU machine; writes into $OUT (default results/out).
# On the offline GPU host, the wheels from shared/offline-wheels.sh are in .whl/.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-results/out}
mkdir -p "$OUT"
R=results/ref-spine   # a fresh study store for this record
rm -rf "$R"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
(which ncu && ncu --version && ncu --query-metrics --chip gh100 > "$OUT/ncu_metrics_gh100.txt") 2>&1 | tail -3
python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -25
python3 -m sweep +experiment=gqa_vs_mha results_dir=$R
python3 -m sweep model=llama3_1_8b study.n_trials=1 results_dir=$R
python3 -m sweep model=llama3_1_8b study.n_trials=1 mode=eager results_dir=$R
python3 -m sweep model=llama3_2_1b study.n_trials=1 results_dir=$R
python3 -m sweep model=llama3_2_1b study.n_trials=1 mode=eager results_dir=$R
python3 -m sweep.cli.record "$OUT/spine.json" --command "bash bench/reference/run_spine.sh" \
  $R/gqa_vs_mha-* $R/baseline-*
tar czf "$OUT/results.tar.gz" --exclude="$R/hydra" "$R" results/ceilings
