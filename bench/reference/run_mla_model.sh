#!/usr/bin/env bash
# One H100 call for latent attention on the model's Triton path (issue 39, item 2): the MLA
# kernels' GPU tests (the fused RoPE / norm / cache write, the absorbed decode, the model's Triton
# path against its torch path, its compiled step), the decode kernel's tiles and split lengths
# (bench.mla_tiles_probe), MLA against GQA-8 on the Llama-3.2-1B body at 8k and 32k, batch 1 and 8,
# against the roofline (bench.attention_kinds_probe), and one DeepSeek-V2-Lite decode step (MLA +
# MoE) under ncu against its analytic bytes (bench.moe_ncu).
#   [TILES=0] bash bench/reference/run_mla_model.sh     # $OUT: card.txt, pytest.log, tiles/, kinds/, step/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/tiles" "$OUT/kinds" "$OUT/step"
. bench/reference/gpu_host.sh
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  date -u; } | tee "$OUT/card.txt"
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_mla_rope.py \
  tests/kernels/test_mla_decode.py tests/kernels/test_model_triton.py -k "mla or over3 or absorbed" \
  > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"; tail -n 3 "$OUT/pytest.log"
if [ "${TILES:-1}" = 1 ]; then  # TILES=0: the tiles are chosen already
  timeout 110 python3 -m bench.mla_tiles_probe "$OUT/tiles" > "$OUT/tiles/console.log" 2>&1
  echo "tiles rc=$?"; tail -n 9 "$OUT/tiles/console.log"
fi
timeout 170 python3 -m bench.attention_kinds_probe "$OUT/kinds" --skip-layers --designs gqa8,mla \
  --contexts 8192,32768 --batches 1,8 > "$OUT/kinds/console.log" 2>&1; echo "kinds rc=$?"
tail -n 10 "$OUT/kinds/console.log"
timeout 120 python3 -m bench.moe_ncu "$OUT/step" --models deepseek_v2_lite --batches 1,8 \
  > "$OUT/step/console.log" 2>&1; echo "step rc=$?"; head -n 4 "$OUT/step/console.log"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
