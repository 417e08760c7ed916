#!/usr/bin/env bash
# After a change of the decode GEMV (its fingerprint changed): check every dot-path tile on this
# GPU, measure the stale calibration families again from the shipped files and ship them with the
# tile choices (merged: other kernels' choices kept), (then, in a second call, the README's main job with
# every cache removed on the new shipped files).   bash bench/reference/run_session_reship.sh
# Output under $OUT: test_gemv.txt, gemv_tile_check.json, run_fresh.sh's logs, shipped/.
# On a device call, run it through run_reship_gate.sh (RESHIP_ONLY=1), which tars $OUT: a call
# returns at most 8 files, and the tile choices in shipped/ were lost once (reship_h200/2026-11-28-cut).
set -euo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
if [ -z "${NO_GEMV:-}" ]; then  # NO_GEMV=1: the GEMV unchanged (another family is stale)
  python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gemv.py -m gpu \
    -k "every_dot_path or split_k or pdl" > "$OUT/test_gemv.txt" 2>&1; tail -n 2 "$OUT/test_gemv.txt"
  python3 bench/reference/gemv_tile_check.py "$OUT/gemv_tile_check.json" | tail -n 1
fi
CAL_TIMEOUT=${CAL_TIMEOUT:-330} bash bench/reference/run_fresh.sh calibrate_more | grep -v "^\s*$" | tail -n 5
slug=$(python3 -c "import torch; from kernels.tuning import slug; print(slug(torch.cuda.get_device_name()))")
mkdir -p "$OUT/shipped"
cp "sweep/analysis/calibrations/$slug".* "$OUT/shipped/"; cp "kernels/tuned/$slug.json" "$OUT/shipped/tuned_$slug.json"
# The main job with every cache removed is a second call (run_fresh.sh fresh_main), on the shipped
# files committed from this one's $OUT/shipped.
