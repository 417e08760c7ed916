#!/usr/bin/env bash
# The main job's regression gate on a GPU: the README's main job with every cache removed
# (bench/reference/run_fresh.sh fresh_main), then its rows against this GPU's record,
# results/reference/main_job/<device>.csv, by `python -m sweep.cli.compare --require-all`: exit 1
# when a design is more than 5% worse (and outside the record's spread) or one of the record's
# designs did not complete, 3 when this GPU has no record.
# A record is replaced (the new rows copied over it) only with the reason written in
# results/reference/main_job/README.md.
#   bash bench/main_job_gate.sh        # on the GPU machine; $OUT: logs, new rows, the comparison
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
bash bench/reference/run_fresh.sh fresh_main
slug=$(python3 -c "import torch; from kernels.tuning import slug; print(slug(torch.cuda.get_device_name()))")
new=$(ls -dt results/gqa_vs_mha-* | head -n 1)
python3 -m bench.main_job_summary "$new/trials.csv" | tee "$OUT/main_job_summary.md"
rec=results/reference/main_job/$slug.csv
if [ ! -f "$rec" ]; then
  echo "gate: no record for $slug ($rec)"; exit 3
fi
python3 -m sweep.cli.compare "$rec" "$new" --require-all | tee "$OUT/gate_compare.txt"
rc=${PIPESTATUS[0]}
echo "gate: $rec against $new: rc=$rc"
exit "$rc"
