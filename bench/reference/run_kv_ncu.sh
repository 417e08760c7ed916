#!/usr/bin/env bash
# Issue 34, item 4: what bounds decode attention over a one-byte cache (section 16 of
# decode_levers_h100.md: not the operand's trip through shared memory). ncu's detail set over the
# first four launches of the split kernel in the kv group's b64 x 8k step, bf16 / int8 / fp8.
#   OUT=out bash bench/reference/run_kv_ncu.sh   # $OUT: card.txt, decode_ncu.{md,json}, *.csv.gz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout ${NCU_TIMEOUT:-480} python3 -m bench.decode_ncu "$OUT" --designs ${DESIGNS:-kv_bf16,kv_int8,kv_fp8} \
  --kernel _split_kernel > "$OUT/ncu.log" 2>&1
echo "ncu rc=$?"; cat "$OUT/decode_ncu.md" 2>/dev/null || tail -n 30 "$OUT/ncu.log"
gzip -f "$OUT"/*.ncu.csv 2>/dev/null
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
