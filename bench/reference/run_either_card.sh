#!/usr/bin/env bash
# One call on whichever card comes (a call naming nvidia-h200 may get an H100).
#   WHAT=tma_mbu (default): an H100 runs run_tma_mbu.sh (the TMA GEMV probe, then the shipped
#     experiments' decode MBU); an H200 the TMA probe, then the reship alone (below, RESHIP_ONLY=1).
#   WHAT=reship: an H200 runs the reship its stale families owe and the gate on the files it
#     shipped (run_forkserver_reship.sh with NO_GEMV=1 and AGAIN=gemv: the decode-attention and
#     launch families measured again, every GEMV entry timed again); an H100 measures
#     +experiment=fused_kernels (issue 34 item 2) on the shipped files instead.
#   OUT=$OUT bash bench/reference/run_either_card.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "card: $card"
reship() {
  NO_GEMV=1 AGAIN=gemv CAL_TIMEOUT=${CAL_TIMEOUT:-300} OUT=$OUT \
    bash bench/reference/run_forkserver_reship.sh
}
if [ "${WHAT:-tma_mbu}" = reship ]; then
  if [[ $card == *H200* ]]; then
    reship
  else
    GATE=0 STUDY_TIMEOUT=260 OUT=$OUT bash bench/reference/run_gate_study.sh fused_kernels
  fi
elif [[ $card == *H100* ]]; then
  OUT=$OUT bash bench/reference/run_tma_mbu.sh
else
  TMA_ONLY=1 TMA_TIMEOUT=${TMA_TIMEOUT:-200} OUT=$OUT bash bench/reference/run_tma_mbu.sh
  RESHIP_ONLY=1 reship
fi
