# Sourced by the run_session_*.sh scripts (one device call each): the device and versions, the
# ceilings measured first on the machine, a summary of check files, and $OUT packed as one
# tarball (out.tgz). Sources gpu_host.sh.
. bench/reference/gpu_host.sh

device_info() {  # name, driver, power limit, torch and triton versions into $OUT/device.txt
  nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > "$OUT/device.txt"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/device.txt"
}

ceilings_first() {  # the device's ceilings before anything else ran: $OUT/ceilings_first.json
  python3 -m sweep.measure.ceilings "$OUT/ceilings_first.json" > "$OUT/ceilings_first.log" 2>&1
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print({k: '%.4g' % v for k, v in d.items() if isinstance(v, float)})" "$OUT/ceilings_first.json"
}

summary() {  # check_*.json files (python -m sweep.report.prediction_check): median / p90 / n
  for f in "$@"; do
    echo "$f"
    python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))['summary']
for s in ('decode', 'prefill'):
    print(s, {k: (round(v['median_abs_pct'], 2), round(v['p90_abs_pct'], 2), v['n'])
              for k, v in d[s].items() if k != 'not_predicted'})" "$f"
  done
}

pack() {  # the studies' folder beside the tables, then $OUT as one tarball
  cp -r results/ref-predict "$OUT/ref-predict" 2>/dev/null
  tar czf /tmp/out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/out.tgz "$OUT/"
}
