#!/usr/bin/env bash
# The decode MLP block in one launch (kernels.decode_mlp) against the step's two launches, on
# this GPU: its GPU tests (grid barrier, CUDA graph replay, PDL), then bench.mlp_probe's table.
#   bash bench/reference/run_mlp_probe.sh        (outputs to $OUT or ./out)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" | tee -a "$OUT/card.txt"
git rev-parse HEAD >> "$OUT/card.txt" 2>/dev/null; date -u >> "$OUT/card.txt"
timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_mlp.py \
  -m gpu > "$OUT/tests.txt" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.txt"; tail -n 3 "$OUT/tests.txt"
timeout "${PROBE_TIMEOUT:-300}" python3 -m bench.mlp_probe "$OUT/mlp_probe.csv" 2>&1 | tee "$OUT/probe.log" | tail -n 60
