#!/usr/bin/env bash
# After issue 34's decode levers (decode_linear.choose timing cold, the attention merge under PDL,
# the greedy argmax inside the decode graph): the GPU tests of the new paths (tests), the merge's
# PDL alone (probe: bench.attention_probe levers f32_pdl_split f32_pdl), the stale calibration
# families measured again from the shipped files and shipped with the tile and path choices
# (reship: run_fresh.sh calibrate_more; a run cut off keeps the groups it finished: ship what it
# wrote, results/calibration and results/tuning, and run it again), and the main job's gate with
# every cache removed on the shipped files (gate: bench/main_job_gate.sh).
#   STEPS="tests probe reship" CAL_TIMEOUT=400 bash bench/reference/run_levers_reship.sh
#   STEPS="reship gate" CAL_TIMEOUT=330 bash bench/reference/run_levers_reship.sh
# $OUT: logs, reship/ (what the calibration wrote), shipped/, gate/, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
STEPS=${STEPS:-tests probe reship}
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
if [[ " $STEPS " == *" tests "* ]]; then
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_argmax.py \
    tests/test_gpu.py -k "argmax or greedy or cudagraph_decode" > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests rc=$?"; tail -n 2 "$OUT/gpu_tests.txt"
fi
if [[ " $STEPS " == *" probe "* ]]; then
  timeout 120 python3 -m bench.attention_probe levers "$OUT/attn_merge_pdl.csv" f32_pdl_split \
    f32_pdl > "$OUT/attn_merge_pdl.log" 2>&1
  echo "merge pdl rc=$?"; tail -n 1 "$OUT/attn_merge_pdl.log"
fi
slug=$(python3 -c "import torch; from kernels.tuning import slug; print(slug(torch.cuda.get_device_name()))")
if [[ " $STEPS " == *" reship "* ]]; then
  CAL_TIMEOUT=${CAL_TIMEOUT:-400} OUT=$OUT/reship bash bench/reference/run_fresh.sh calibrate_more \
    | grep -v "^\s*$" | tail -n 5
  mkdir -p "$OUT/shipped"
  cp "sweep/analysis/calibrations/$slug".* "$OUT/shipped/"
  cp "kernels/tuned/$slug.json" "$OUT/shipped/tuned_$slug.json"
fi
if [[ " $STEPS " == *" gate "* ]]; then
  OUT=$OUT/gate bash bench/main_job_gate.sh; echo "gate rc=$?" | tee "$OUT/gate/rc.txt"
fi
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
