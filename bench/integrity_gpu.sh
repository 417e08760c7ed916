#!/usr/bin/env bash
# Bad input and a shared device on a GPU (issue 36, item 3), after the main job's gate:
#   1. the 1.07 TB design (Llama-3.1-8B shape, batch 256, prompt 32000) refused before any work;
#   2. a predict-only study with no hardware= prices this GPU (hardware=auto);
#   3. two studies started together on one GPU: their measuring intervals never overlap.
#   bash bench/integrity_gpu.sh      # on the GPU machine; $OUT gets the logs and intervals.csv
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
t0=$(date +%s%N)
timeout 60 python3 -m sweep model=llama3_1_8b workload.batch=256 workload.prompt_len=32000 \
  results_dir=/tmp/int_big > "$OUT/big.log" 2>&1
echo "big design: rc=$? in $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(grep -m1 error "$OUT/big.log")"
timeout 120 python3 -m sweep +experiment=design_space study.predict=true study.n_trials=20 \
  results_dir=/tmp/int_pred > "$OUT/predict_auto.log" 2>&1
echo "predict-only hardware=auto: rc=$? $(grep -m1 -o 'h100[a-z_]*\|h200[a-z_]*' "$OUT/predict_auto.log" | head -1)"
for s in a b; do
  timeout 400 python3 -m sweep +experiment=gqa_vs_mha experiment.space.n_kv_heads.divisors_of=n_heads \
    study.n_trials=3 results_dir=/tmp/int_two_$s > "$OUT/two_$s.log" 2>&1 &
done
wait
python3 - "$OUT" <<'PY'
import glob, sys
import pandas as pd
rows = []
for s in "ab":
    for f in glob.glob(f"/tmp/int_two_{s}/*/trials.csv"):
        d = pd.read_csv(f)
        d = d[d.state == "COMPLETE"]
        rows += [dict(study=s, n_kv_heads=r.n_kv_heads, start=r.measure_start, end=r.measure_end,
                      contended=r.contended, evidence=r.contended_evidence,
                      decode_tok_s=r.decode_tok_s) for r in d.itertuples()]
t = pd.DataFrame(rows).sort_values("start")
t.to_csv(f"{sys.argv[1]}/intervals.csv", index=False)
s, e = pd.to_datetime(t.start), pd.to_datetime(t.end)
overlap = sum(s.iloc[i + 1] < e.iloc[i] for i in range(len(t) - 1))
print(t.to_string(index=False))
print(f"{len(t)} measured designs in two studies; overlapping measurements: {overlap}")
PY
