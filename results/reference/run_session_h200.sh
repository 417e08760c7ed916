#!/usr/bin/env bash
# One H200 device call (2026-11-25): the H200's ceilings measured first on the just-started
# machine (the warm-up from idle of sweep.measure.ceilings checked), then the shipped
# experiments at batch 1 priced from the H100 calibration shipped with the package, transferred
# (run_predict.sh h200 b1); everything under $OUT as one tarball (out.tgz).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm --format=csv > "$OUT/device.txt"
. results/reference/gpu_host.sh
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/device.txt"
python3 -m sweep.measure.ceilings "$OUT/ceilings_first.json" > "$OUT/ceilings_first.log" 2>&1
python3 -c "import json; d=json.load(open('$OUT/ceilings_first.json')); print({k: '%.4g' % v for k, v in d.items() if isinstance(v, float)})"
CAL=sweep/analysis/calibrations/nvidia_h100_80gb_hbm3.json BUDGET_S=${BUDGET_S:-500} OUT=$OUT \
  bash results/reference/run_predict.sh h200 b1 > "$OUT/run.log" 2>&1
python3 -c "
import json; d=json.load(open('$OUT/check_h200.json'))
for s in ('decode','prefill'): print(s, {k: (round(v['median_abs_pct'],2), round(v['p90_abs_pct'],2), v['n']) for k,v in d[s].items() if k!='not_predicted'})"
cp -r results/ref-predict "$OUT/ref-predict" 2>/dev/null
tar czf /tmp/out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/out.tgz "$OUT/"
