#!/usr/bin/env bash
# One device call (2026-11-25): half of the frozen held-out set measured with today's kernels and
# priced from the H100 calibration shipped with the package (on another GPU transferred by its
# ceilings; on every machine its fixed costs measured on this host: host_costs), after, with
# PROBE=1, the transfer probe (transfer_probe.py: this GPU's ceilings twice and a sample of the
# shipped table's entries timed again here) and, with NAN_PROBE=name,name, nan_probe.py on those
# cases in the last 150 s, with MODULES=name,name modules_probe.py (per-kernel times) on those
# pairs in 150 s. HALF=even|odd, or NAMES="a b" for those pairs only. Everything under $OUT as
# out.tgz.
#   HALF=even PROBE=1 bash bench/reference/run_session_heldout.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
t0=$(date +%s)
. bench/reference/session_common.sh
device_info
if [ "${PROBE:-0}" = 1 ]; then
  python3 bench/reference/transfer_probe.py "$OUT/transfer_probe.json" > "$OUT/transfer_probe.log" 2>&1
  tail -n 30 "$OUT/transfer_probe.log"
fi
reserve=0; [ -n "${NAN_PROBE:-}" ] && reserve=150; [ -n "${MODULES:-}" ] && reserve=$((reserve + 150))
left=$(( ${BUDGET_S:-570} - ($(date +%s) - t0) - reserve ))
[ -n "${NAMES:-}" ] || : "${HALF:?HALF=even|odd or NAMES=...}"
echo "held-out ${NAMES:-half $HALF} with ${left} s left"
CAL=sweep/analysis/calibrations/nvidia_h100_80gb_hbm3.json VALIDATE_TIMEOUT=$left OUT=$OUT/heldout \
  bash bench/reference/run_heldout.sh > "$OUT/heldout.log" 2>&1
echo "pairs measured: $(wc -l < "$OUT/heldout/measured.jsonl" 2>/dev/null)"; grep -h "calibration:" "$OUT/heldout/validate.log" | head -5
tail -n 3 "$OUT/heldout/validate.log"
if [ -n "${MODULES:-}" ]; then  # MODULES=name,name: modules_probe.py (per-kernel times) on these
  ONLY=$MODULES timeout 150 python3 bench/reference/modules_probe.py "$OUT/modules" > "$OUT/modules.log" 2>&1
  tail -n 12 "$OUT/modules.log"
fi
if [ -n "${NAN_PROBE:-}" ]; then  # NAN_PROBE=name,name: nan_probe.py on these cases, 3 loops each
  ONLY=$NAN_PROBE REPEATS=3 timeout $(( ${BUDGET_S:-570} + 10 - ($(date +%s) - t0) )) \
    python3 bench/reference/nan_probe.py > "$OUT/nan_probe.log" 2>&1; tail -n 25 "$OUT/nan_probe.log"
fi
pack
