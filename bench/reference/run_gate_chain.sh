#!/usr/bin/env bash
# One call on a fresh machine: the main job's regression gate with every cache removed
# (run_reship_gate.sh GATE_ONLY=1), then bench/chain_probe.py (a step's GEMVs in sequence against
# the sum of their calibrated prices, PDL on and off).
#   OUT=$OUT bash bench/reference/run_gate_chain.sh      # $OUT/g/all.tgz, $OUT/chain/
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/g" "$OUT/chain"
GATE_ONLY=1 OUT=$OUT/g bash bench/reference/run_reship_gate.sh > "$OUT/gate.log" 2>&1
echo "gate script rc=$?"; tail -n 4 "$OUT/gate.log"
PROBE_TIMEOUT=${PROBE_TIMEOUT:-240} OUT=$OUT/chain bash bench/reference/run_chain_probe.sh \
  > "$OUT/chain.log" 2>&1
tail -n 6 "$OUT/chain.log" | cut -c1-1500
