#!/usr/bin/env bash
# Probe: how fast does ncu get through decode-window kernels vs the prefill window?
set -uo pipefail
OUT=${OUT:-results/out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
ncu --version | tail -1
P=results/probe/run; rm -rf $P; mkdir -p $P
python3 - <<'PY'
import json
from zoo import ModelConfig
cfg = ModelConfig.from_name("llama3_2_1b")
for name, stage, steps in [("prefill", "prefill", [2, 3]), ("decode1", "decode", [2, 3]), ("decode3", "decode", [2, 5])]:
    spec = {"model": cfg.to_dict(), "workload": {"batch": 1, "prompt_len": 512, "new_tokens": 128, "warmup": 1, "repeats": 1},
            "device": "cuda", "mode": "eager", "seed": 0, "ncu_stage": stage,
            "profile": {"options": {"ncu_decode_steps": steps}}}
    json.dump(spec, open(f"results/probe/run/{name}.json", "w"))
PY
MET=$(python3 -c "from sweep.measure import ncu; print(','.join(ncu.METRICS.values()))")
probe() {  # name spec metrics limit extra...
  local name=$1 spec=$2 met=$3 lim=$4; shift 4
  local t0=$(date +%s)
  timeout $lim ncu --clock-control none --profile-from-start off --target-processes all --metrics "$met" \
     --csv --page raw --print-units base "$@" --log-file $P/$name.csv \
     python3 -m sweep.measure.trial $P/$spec.json $P/$name.result.json > $P/$name.stdout 2>&1 &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do sleep 10; echo "  $name t=$(( $(date +%s)-t0 ))s kernels=$(grep -c '==PROF== Profiling' $P/$name.csv 2>/dev/null)"; done
  wait $pid; echo "$name rc=$? t=$(( $(date +%s)-t0 ))s kernels=$(grep -c '"ID"\|^"[0-9]' $P/$name.csv)"
  grep -m3 "==PROF== Profiling" $P/$name.csv; grep "==PROF== Profiling" $P/$name.csv | tail -2; grep -i "warn\|error" $P/$name.csv $P/$name.stdout | head -5
}
probe prefill_full prefill "$MET" 120
probe decode1_dram decode1 "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum" 90
probe decode1_full decode1 "$MET" 150
cp $P/*.csv "$OUT/" 2>/dev/null; ls -la $P
