#!/usr/bin/env bash
# The design advisor checked by measurement on the H100 (issue 13): deliberately misaligned
# variants of the Llama-3.2-1B shape; for each, `python -m sweep.cli.advise --bench --measure`
# micro-benchmarks the GEMM shapes the committed calibration lacks, prices the alternatives, and
# measures the design and its first suggestion (batch 4, prompt 2048, 10 repeats).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-results/out}
mkdir -p "$OUT"
. bench/reference/gpu_host.sh
wl="workload=long_context workload.batch=4 workload.prompt_len=2048 workload.new_tokens=32 workload.repeats=10 workload.warmup=2"
i=0
while read -r design; do
  i=$((i + 1))
  python3 -m sweep.cli.advise model=llama3_2_1b $design $wl hardware=h100_sxm --bench --measure \
    --calibration results/reference/calibration_h100.json --out "$OUT/advise/$i" \
    > "$OUT/advise_$i.log" 2>&1 || echo "design $i failed: $(tail -3 $OUT/advise_$i.log)"
  grep -E "^Measured|^\| [a-z_]+=" "$OUT/advise_$i.log" | head -3
done <<'DESIGNS'
model.ffn_dim=8100
model.d_model=2000
model.ffn_dim=6000
model.d_model=2100
model.vocab_size=128255
model.head_dim=96 model.n_heads=20 model.n_kv_heads=4
model.ffn_dim=7000
DESIGNS
