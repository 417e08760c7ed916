#!/usr/bin/env bash
# Reference run for the profiling issue (bash bench/reference/run_profiling.sh PART):
#   ncu:   +experiment=gqa_vs_mha profile=ncu on the Llama-3.2-1B shape, 3 designs (MQA, GQA-8 =
#          the shipped shape, MHA), batch 8, prompt 2048, Triton kernels; raw ncu CSVs of GQA-8.
#   torch: profile=torch (torch.profiler + cuBLASLt log) on the 1B shape, batch 1, cudagraph and
#          eager; the NVTX-overhead bench group.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-results/out}
mkdir -p "$OUT"
. bench/reference/gpu_host.sh
part=$1
if [ "$part" = ncu ]; then
  R=results/ref-ncu; rm -rf $R
  python3 -m sweep +experiment=gqa_vs_mha profile=ncu model.kernels=triton \
    experiment.space.n_kv_heads.divisors_of=null '+experiment.space.n_kv_heads.choices=[1,8,32]' \
    workload.batch=8 workload.prompt_len=2048 workload.new_tokens=64 workload.repeats=5 \
    results_dir=$R
  S=$(ls -d $R/gqa_vs_mha-*/)
  T=$(python3 -c "import pandas as p,sys; d=p.read_parquet('$S/trials.parquet'); print(int(d[d.n_kv_heads==8].number.iloc[0]))")
  for f in prefill_memory prefill_detail decode_memory decode_detail; do
    gzip -c $S/trials/$(printf %04d $T)/ncu_$f/ncu.csv > "$OUT/ncu_${f}_llama3_2_1b_b8_p2048.csv.gz"
  done
  python3 -m sweep.cli.record "$OUT/profiling_ncu_h100.json" \
    --command "bash bench/reference/run_profiling.sh ncu" $S
  cp $S/roofline.png "$OUT/profiling_ncu_roofline.png" 2>/dev/null
elif [ "$part" = torch ]; then
  R=results/ref-torch; rm -rf $R
  for mode in cudagraph eager; do
    python3 -m sweep model=llama3_2_1b profile=torch mode=$mode study.n_trials=1 \
      study.name=torch-llama3_2_1b-b1-$mode results_dir=$R
  done
  python3 -m sweep.cli.record "$OUT/profiling_torch_h100.json" \
    --command "bash bench/reference/run_profiling.sh torch" $R/torch-llama3_2_1b-b1-*
  d=$R/torch-llama3_2_1b-b1-cudagraph/trials/0000/torch
  gzip -c $d/trace_decode.json > "$OUT/trace_decode_llama3_2_1b_b1_cudagraph.json.gz"
  cp $d/torch_ops_decode.csv "$OUT/torch_ops_decode_llama3_2_1b_b1_cudagraph.csv"
  head -c 3000000 $d/cublaslt.log | gzip > "$OUT/cublaslt_llama3_2_1b_b1.log.gz"
  python3 -m sweep.cli.bench --out "$OUT/nvtx_h100.json" --group nvtx \
    --command "bash bench/reference/run_profiling.sh torch"
fi
ls -la "$OUT"
