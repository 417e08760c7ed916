#!/usr/bin/env bash
# One device call (2026-11-25): per-kernel times of held-out pairs (modules_probe.py, MODULES=names)
# and, with NAN_PROBE=names, nan_probe.py on those cases (3 loops each). Everything under $OUT as
# out.tgz.   MODULES=d64_w768,d2_w512 NAN_PROBE=mis_b12_p768 bash bench/reference/run_session_probes.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/session_common.sh
device_info
python3 -m sweep.measure.ceilings "$OUT/ceilings.json" > /dev/null 2>&1
if [ -n "${MODULES:-}" ]; then
  ONLY=$MODULES timeout "${MODULES_S:-300}" python3 bench/reference/modules_probe.py "$OUT/modules" > "$OUT/modules.log" 2>&1
  tail -n 12 "$OUT/modules.log"
fi
if [ -n "${NAN_PROBE:-}" ]; then
  ONLY=$NAN_PROBE REPEATS=3 timeout "${NAN_S:-200}" python3 bench/reference/nan_probe.py > "$OUT/nan_probe.log" 2>&1
  tail -n 20 "$OUT/nan_probe.log"
fi
pack
