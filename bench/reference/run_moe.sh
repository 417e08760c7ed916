#!/usr/bin/env bash
# Issue 38 on a GPU: the MoE kernels' tests on the GPU (fp32 and bf16 against the reference, the
# fused routing and sort, a CUDA graph's capture and replay; the Triton model path of MoE and
# QK-norm designs against the torch path),
# then bench/moe_probe.py (the MoE presets' decode against the touched-bytes roofline; one MoE
# layer against its peers).   bash bench/reference/run_moe.sh     # $OUT: tests.txt, moe/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_gemm.py \
  tests/kernels/test_model_triton.py > "$OUT/tests.txt" 2>&1; tail -n 3 "$OUT/tests.txt"
timeout "${PROBE_TIMEOUT:-420}" python3 -m bench.moe_probe "$OUT/moe" ${PROBE_ARGS:-} 2>&1 | tail -n 30
