#!/usr/bin/env bash
# Reference run for the kernels issue: GPU kernel tests, then `python -m sweep.bench` groups
# (appending to one JSON record). Usage: bash results/reference/run_bench.sh OUT.json GROUP...
set -uo pipefail
export PYTHONUNBUFFERED=1
out=$1; shift
. results/reference/gpu_host.sh
for g in "$@"; do
  if [ "$g" = tests ]; then
    python3 -m pytest -q tests/kernels tests/test_gpu.py 2>&1 | tail -25
  else
    python3 -m sweep.bench --out "$out" --group "$g" \
      --command "bash results/reference/run_bench.sh $out $*"
  fi
done
