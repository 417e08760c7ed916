#!/usr/bin/env bash
# One device call (2026-11-25): gap_probe.py (the idle time between kernels of a graphed step)
# and, with NAN_PROBE=names, nan_probe.py's default variant on them, its tile choices kept.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/session_common.sh
device_info
python3 bench/reference/gap_probe.py "$OUT/gap_probe.json" 2>&1 | tail -n 3
if [ -n "${NAN_PROBE:-}" ]; then
  ONLY=$NAN_PROBE REPEATS=3 VARIANTS=default timeout 200 python3 bench/reference/nan_probe.py > "$OUT/nan_probe.log" 2>&1
  tail -n 5 "$OUT/nan_probe.log"
fi
pack
