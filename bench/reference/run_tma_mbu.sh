#!/usr/bin/env bash
# One H100 call: the TMA GEMV probe (bench/tma_gemv_probe.py: the decode projections with their
# weight tiles read by TMA against the shipped kernels.gemv, chained and cold), then
# run_decode_mbu.sh (the shipped experiments' designs measured and predicted on this tree's
# shipped files: issue 34 items 3 and 5).   OUT=$OUT bash bench/reference/run_tma_mbu.sh
# ($OUT: tma/ and all.tgz)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/tma"
. bench/reference/gpu_host.sh
gpu_card "$OUT/tma/device.txt"
t0=$(date +%s)
timeout "${TMA_TIMEOUT:-230}" python3 -m bench.tma_gemv_probe "$OUT/tma" > "$OUT/tma/console.log" 2>&1
echo "tma rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a "$OUT/tma/walls.txt"
grep -o "'shape': [^,]*, 'M': [0-9]*\|'shipped_chain_us': [0-9.]*\|'best': [^,]*, 'best_chain_us': [0-9.]*, 'tma_gain_pct': [-0-9.]*" \
  "$OUT/tma/console.log" | paste - - - | head -n 40
(cd "$OUT" && tar czf tma.tgz --remove-files tma)
OUT=$OUT bash bench/reference/run_decode_mbu.sh
