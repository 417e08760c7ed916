#!/usr/bin/env bash
# One H100 call: the TMA GEMV probe (bench/tma_gemv_probe.py: the decode projections with their
# weight tiles read by TMA against the shipped kernels.gemv, chained and cold), then, unless
# TMA_ONLY=1, run_decode_mbu.sh (the shipped experiments' designs measured and predicted on this
# tree's shipped files: issue 34 items 3 and 5). Worst case TMA_TIMEOUT + 3 x STUDY_TIMEOUT
# (230 + 3 x 200 s by default: lower them to stay inside a 600-s call).
#   OUT=$OUT bash bench/reference/run_tma_mbu.sh   ($OUT: tma.tgz, packed into all.tgz with the
#   studies' files by run_decode_mbu.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
probe tma "${TMA_TIMEOUT:-230}" bench.tma_gemv_probe
grep -o "'shape': [^,]*, 'M': [0-9]*\|'shipped_chain_us': [0-9.]*\|'best': [^,]*, 'best_chain_us': [0-9.]*, 'tma_gain_pct': [-0-9.]*" \
  "$OUT/tma/console.log" | paste - - - | head -n 40
probe_pack tma
[ -n "${TMA_ONLY:-}" ] || OUT=$OUT bash bench/reference/run_decode_mbu.sh
