#!/usr/bin/env bash
# The zoo's own decode path at batch 1 and 8 on today's kernels (no peers): Llama-3.2-1B (small)
# then Llama-3.1-8B (large), one sweep.bench process each (BATCHES="1" narrows the default 1,8).
#   bash bench/reference/run_bench_now.sh        # $OUT: card.txt, bench.{small,large}.json, logs, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
for g in small large; do
  timeout ${BENCH_TIMEOUT:-200} python3 -m sweep.cli.bench --out "$OUT/bench.$g.json" --group $g \
    --batches ${BATCHES:-1,8} --variants cudagraph-triton --no-peer \
    --command "BATCHES=${BATCHES:-1,8} bash bench/reference/run_bench_now.sh" > "$OUT/bench.$g.log" 2>&1
  echo "$g rc=$?"; grep -i "tok/s\|mbu" "$OUT/bench.$g.log" | tail -n 4
done
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
