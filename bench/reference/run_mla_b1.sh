#!/usr/bin/env bash
# One short H100 call for latent attention at batch 1 (issue 39, item 2): the MLA kernels' GPU
# tests (and kernels.head_gemv's) and bench.head_gemv_probe (the per-head GEMV against cuBLAS's
# batched GEMM), bench.mla_tiles_probe --shipped (the decode kernel as shipped), then the
# attention_kind experiment's MLA design at batch 1 x 32k alone (the same model,
# workload and mode as its row in `+experiment=attention_kind`, one design), then MLA against
# GQA-8 at 8k and 32k (bench.attention_kinds_probe) while time is left.
#   bash bench/reference/run_mla_b1.sh     # $OUT: card.txt, pytest.log, study/, kinds/, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/study" "$OUT/kinds"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_mla_decode.py tests/kernels/test_head_gemv.py \
  tests/kernels/test_model_triton.py -k "mla or over3 or reference" > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -n 1 "$OUT/pytest.log"
mkdir -p "$OUT/tiles"; timeout 120 python3 -m bench.mla_tiles_probe "$OUT/tiles" --shipped \
  > "$OUT/tiles/console.log" 2>&1; echo "tiles rc=$?"; cat "$OUT/tiles/mla_tiles.md"
mkdir -p "$OUT/head_gemv"; timeout 90 python3 -m bench.head_gemv_probe "$OUT/head_gemv" \
  > "$OUT/head_gemv/console.log" 2>&1; echo "head_gemv rc=$?"; cat "$OUT/head_gemv/head_gemv.csv"
timeout 150 python3 -m sweep model=llama3_2_1b workload=long_32k workload.batch=1 \
  model.n_heads=16 model.n_kv_heads=16 +model.kv_lora_rank=512 +model.qk_nope_head_dim=128 \
  +model.qk_rope_head_dim=64 +model.v_head_dim=128 results_dir="$OUT/study/r" \
  > "$OUT/study/console.log" 2>&1; echo "study rc=$?"; grep -E "^\[1/1\]" "$OUT/study/console.log"
cp "$OUT"/study/r/*/trials.csv "$OUT/study/" 2>/dev/null; rm -rf "$OUT/study/r"
timeout 100 python3 -m bench.attention_kinds_probe "$OUT/kinds" --skip-layers --designs gqa8,mla \
  --contexts 8192,32768 --batches 1,8 > "$OUT/kinds/console.log" 2>&1; echo "kinds rc=$?"
tail -n 10 "$OUT/kinds/console.log"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
