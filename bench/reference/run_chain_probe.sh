#!/usr/bin/env bash
# One call: bench/chain_probe.py (a step's GEMVs in sequence against the sum of their calibrated
# prices, PDL on and off; and with each layer's decode attention in the chain) for Llama-3.2-1B and
# Llama-3.1-8B at the development set's batch 1 x 576 and 8 x 4128 positions (CASES=model:B:S,...).
#   OUT=$OUT bash bench/reference/run_chain_probe.sh      # $OUT/chain.json, log.txt
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  date -u; } > "$OUT/card.txt"
timeout "${PROBE_TIMEOUT:-300}" python3 bench/chain_probe.py "$OUT/chain.json" ${CASES:-} 2>&1 \
  | grep -v Warning | tee "$OUT/log.txt"
