#!/usr/bin/env bash
# One call on whichever card comes: an H100 runs run_tma_mbu.sh (the TMA GEMV probe, then the
# shipped experiments' decode MBU); an H200 the TMA probe (TMA_TIMEOUT, default 200 s) and then
# the reship its stale families owe (run_forkserver_reship.sh with NO_GEMV=1, AGAIN=gemv,
# RESHIP_ONLY=1: the gate is a second call on the shipped files).   OUT=$OUT bash this
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "card: $card"
if [[ $card == *H100* ]]; then
  OUT=$OUT bash bench/reference/run_tma_mbu.sh
else
  . bench/reference/gpu_host.sh
  mkdir -p "$OUT/tma"; gpu_card "$OUT/tma/device.txt"
  timeout "${TMA_TIMEOUT:-200}" python3 -m bench.tma_gemv_probe "$OUT/tma" > "$OUT/tma/console.log" 2>&1
  echo "tma rc=$?" | tee -a "$OUT/tma/walls.txt"
  (cd "$OUT" && tar czf tma.tgz --remove-files tma)
  NO_GEMV=1 AGAIN=gemv CAL_TIMEOUT=${CAL_TIMEOUT:-300} RESHIP_ONLY=1 OUT=$OUT \
    bash bench/reference/run_forkserver_reship.sh
fi
