#!/usr/bin/env bash
# The held-out set on a two-GPU host in one call: HALF=even on GPU 0 and HALF=odd on GPU 1, each in
# its own copy of the tree (its own results/: calibration, ceilings, studies), in parallel
# (bench/reference/run_heldout.sh each). Then combine_heldout.py over the two halves' files.
#   bash bench/reference/run_heldout_x2.sh        # $OUT: card.txt, even/, odd/, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
python3 -c "import torch; print('GPUs', torch.cuda.device_count())" | tee -a "$OUT/card.txt"
here=$PWD
for h in even odd; do
  rm -rf "/tmp/ho_$h"; cp -a "$here" "/tmp/ho_$h"; mkdir -p "$OUT/$h"
done
(cd /tmp/ho_even && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site:/tmp/ho_even HALF=even \
   VALIDATE_TIMEOUT=${VALIDATE_TIMEOUT:-520} OUT="$OUT/even" bash bench/reference/run_heldout.sh \
   > "$OUT/even/console.txt" 2>&1) &
(cd /tmp/ho_odd && CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site:/tmp/ho_odd HALF=odd \
   VALIDATE_TIMEOUT=${VALIDATE_TIMEOUT:-520} OUT="$OUT/odd" bash bench/reference/run_heldout.sh \
   > "$OUT/odd/console.txt" 2>&1) &
wait
for h in even odd; do echo "$h: $(grep -c '^\[' "$OUT/$h/validate.log" 2>/dev/null) pairs"; tail -n 1 "$OUT/$h/validate.log"; done
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
