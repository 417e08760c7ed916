#!/usr/bin/env bash
# The eleventh session's maintenance call (issue 34): the GPU tests of the greedy path and the L2
# prefetch launch; the stale calibration families (elementwise, argmax, after the micro-benchmarks'
# steadiest retry and the argmax NaN rule) and the 7 GEMV entries removed as disturbed, measured
# again from the shipped files and shipped (run_fresh.sh calibrate_more); the main job's gate with
# every cache removed (bench/main_job_gate.sh); then Nsight Compute over one decode step of the
# main job's MQA and n_kv_heads 2 designs and the 1B at batch 1 (bench.decode_ncu).
#   CAL_TIMEOUT=240 bash bench/reference/run_reship_ncu.sh   # $OUT: logs, reship/, shipped/, gate/, ncu/, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_argmax.py \
  tests/kernels/test_l2_prefetch.py tests/test_gpu.py -k "argmax or greedy or cudagraph_decode or pdl" \
  > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -n 2 "$OUT/gpu_tests.txt"
slug=$(python3 -c "import torch; from kernels.tuning import slug; print(slug(torch.cuda.get_device_name()))")
CAL_TIMEOUT=${CAL_TIMEOUT:-240} OUT=$OUT/reship bash bench/reference/run_fresh.sh calibrate_more \
  | grep -v "^\s*$" | tail -n 5
mkdir -p "$OUT/shipped"
cp "sweep/analysis/calibrations/$slug".* "$OUT/shipped/"
cp "kernels/tuned/$slug.json" "$OUT/shipped/tuned_$slug.json"
OUT=$OUT/gate bash bench/main_job_gate.sh; echo "gate rc=$?" | tee "$OUT/gate/rc.txt"
timeout ${NCU_TIMEOUT:-200} python3 -m bench.decode_ncu "$OUT/ncu" > "$OUT/ncu.log" 2>&1
echo "ncu rc=$?"; grep "^## " "$OUT/ncu/decode_ncu.md" 2>/dev/null
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
