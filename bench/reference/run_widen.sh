#!/usr/bin/env bash
# Issue 34: a one-byte cache widened to fp16 before shared memory (WIDEN), per kernel and in the
# kv-dominated decode step (bench.widen_probe), on a tree with
# results/reference/decode_levers_h100/s27_widen/widen.patch applied (section 16).
#   OUT=out bash bench/reference/run_widen.sh   # $OUT: card.txt, kernels.csv, step.csv, *.log, all.tgz
PROBE=widen_probe KERNELS_TIMEOUT=${KERNELS_TIMEOUT:-220} STEP_TIMEOUT=${STEP_TIMEOUT:-130} \
  exec bash bench/reference/run_kv_ahead.sh
