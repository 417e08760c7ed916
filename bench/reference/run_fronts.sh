#!/usr/bin/env bash
# Reference run for the studies-at-scale issue, must-show 1 (one command, one GPU): gqa_vs_mha
# and kv_quant on the Llama-3.2-1B shape (Triton kernels, long-context workload, so both differ
# only in the KV cache), then the front comparison and each study's HTML report.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-results/out}
mkdir -p "$OUT"
. bench/reference/gpu_host.sh
R=results/ref-fronts; rm -rf $R
start=$(date +%s)
common="model.kernels=triton workload.repeats=3 workload.warmup=1 results_dir=$R"
python3 -m sweep +experiment=gqa_vs_mha $common
python3 -m sweep +experiment=kv_quant $common
python3 -m sweep.cli.compare_fronts $R/gqa_vs_mha-*/ $R/kv_quant-*/ \
  --objectives decode_tok_s:max kv_bytes_per_token:min --out $R/fronts
echo "wall: $(( $(date +%s) - start )) s for both studies and the comparison"
python3 -m sweep.cli.record "$OUT/fronts_h100.json" --command "bash bench/reference/run_fronts.sh" \
  --note "wall $(( $(date +%s) - start )) s" $R/gqa_vs_mha-*/ $R/kv_quant-*/
cp $R/fronts/fronts.png $R/fronts/fronts.html $R/fronts/fronts.csv $R/fronts/fronts.json "$OUT/"
cp $R/gqa_vs_mha-*/report.html "$OUT/report_gqa_vs_mha.html"
cp $R/kv_quant-*/report.html "$OUT/report_kv_quant.html"
ls -la "$OUT"
