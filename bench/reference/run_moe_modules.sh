#!/usr/bin/env bash
# Issue 38 item 4, the diagnosis: where an MoE design's decode and prefill time goes, module by
# module (torch.profiler over one eager step, `profile=modules`: {stage}_meas_ms_<module> beside
# the performance model's {stage}_pred_ms_<module>), on `+experiment=moe_vs_dense` (designs of
# no validation set: the frozen heldout_moe set is judged, never diagnosed on).
# Usage (GPU host, from the repository root): OUT=DIR bash bench/reference/run_moe_modules.sh
set -uo pipefail
source bench/reference/gpu_host.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  date -u; git rev-parse --short HEAD 2>/dev/null; } > "$OUT/card.txt" 2>&1
timeout "${STUDY_TIMEOUT:-480}" python -m sweep +experiment=moe_vs_dense profile=modules \
  results_dir="$OUT/mvd" > "$OUT/console.log" 2>&1
echo "rc=$?" >> "$OUT/console.log"
cp "$OUT"/mvd/moe_vs_dense-*/trials.csv "$OUT/trials.csv" 2>/dev/null
rm -rf "$OUT"/mvd/hydra
