#!/usr/bin/env bash
# One device call of shipped-experiment studies priced from the calibration shipped with the
# package (CAL= for run_predict.sh), within BUDGET_S: `bash run_session_predict.sh b1:head_dim
# b8:kv_quant ...` runs each WORKLOAD:EXPERIMENT in order while time is left (each cut at the
# time left), then the error check per workload; everything under $OUT as one tarball (out.tgz).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > "$OUT/device.txt"
. results/reference/gpu_host.sh
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/device.txt"
# the device's ceilings first (on a machine just started: from idle), kept beside the studies'
python3 -m sweep.measure.ceilings "$OUT/ceilings_first.json" > "$OUT/ceilings_first.log" 2>&1
python3 -c "import json; d=json.load(open('$OUT/ceilings_first.json')); print({k: '%.4g' % v for k, v in d.items() if isinstance(v, float)})"
for item in "$@"; do
  w=${item%%:*}; e=${item#*:}
  left=$(( ${BUDGET_S:-560} - 25 - ($(date +%s) - t0) )); [ "$left" -lt 30 ] && break
  CAL= TIMEOUT_S=$left OUT=$OUT bash results/reference/run_predict.sh "$w" "$e" > /dev/null
done
for w in b1 b8; do
  ls -d results/ref-predict/*-$w >/dev/null 2>&1 && OUT=$OUT bash results/reference/run_predict.sh check $w > /dev/null
done
cat "$OUT"/rc.txt; for f in "$OUT"/check_*.json; do echo "$f"; python3 -c "
import json,sys; d=json.load(open('$f'))
for s in ('decode','prefill'): print(s, {k: (round(v['median_abs_pct'],2), round(v['p90_abs_pct'],2), v['n']) for k,v in d[s].items() if k!='not_predicted'})"; done
cp -r results/ref-predict "$OUT/ref-predict" 2>/dev/null
tar czf /tmp/out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/out.tgz "$OUT/"
