#!/usr/bin/env bash
# Reference run for the kernels issue: GPU kernel tests, then `python -m sweep.cli.bench` groups
# (appending to one JSON record). Usage: bash bench/reference/run_bench.sh OUT.json GROUP...
# GROUP `levers`: the decode levers' before/after, each its own record OUT.json.<lever>.json, the
# zoo's path only at batch 1 (small: Llama-3.2-1B, large: Llama-3.1-8B): PREFETCH_X in the GEMV's
# autotune space (switch gemv_prefetch) x RoPE and cache write folded into decode attention
# (rope_in_attention), then both with the autotuners timing cold (cold_tune); the switches are
# `python -m sweep.cli.bench --switch NAME=true|false` (kernels/switches.py).
# SIZES (default "small large"), BATCHES (default 1) and LEVERS (default "000 100 010 110 111",
# digits prefetch, fold, cold and, optional, W_AHEAD: the dot path's weights loaded ahead by hand,
# default 1) narrow it.
set -uo pipefail
export PYTHONUNBUFFERED=1
out=$1; shift
. bench/reference/gpu_host.sh
for g in "$@"; do
  if [ "$g" = tests ]; then
    python3 -m pytest -q tests/kernels tests/test_gpu.py 2>&1 | tail -25
  elif [ "$g" = levers ]; then
    for size in ${SIZES:-small large}; do
      for lv in ${LEVERS:-000 100 010 110 111}; do
        px=${lv:0:1} fold=${lv:1:1} cold=${lv:2:1} wa=${lv:3:1}; wa=${wa:-1}; t0=$(date +%s)
        tf() { [ "$1" = 1 ] && echo true || echo false; }
        sw="--switch gemv_prefetch=$(tf $px) --switch rope_in_attention=$(tf $fold)"
        sw="$sw --switch cold_tune=$(tf $cold) --switch gemv_w_ahead=$(tf $wa)"
        python3 -m sweep.cli.bench --out "$out.$size.b${BATCHES:-1}.prefetch$px.fold$fold.cold$cold.ahead$wa.json" \
          --group $size --batches ${BATCHES:-1} --variants cudagraph-triton --no-peer $sw \
          --command "LEVERS=$lv SIZES=$size BATCHES=${BATCHES:-1} bash bench/reference/run_bench.sh $out levers"
        echo "levers $size $lv: $(( $(date +%s) - t0 )) s"
      done
    done
  else
    python3 -m sweep.cli.bench --out "$out" --group "$g" \
      --command "bash bench/reference/run_bench.sh $out $*"
  fi
done
