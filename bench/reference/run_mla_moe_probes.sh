#!/usr/bin/env bash
# One H100 call for the MLA and MoE kernels (issues 38, 39): the MLA decode kernel's time and
# ncu DRAM bytes (bench.mla_ncu), the MoE grouped GEMMs' tiles (bench.moe_tiles_probe), one
# decode step of the DeepSeek-V2-Lite design (MLA + MoE) under ncu against its analytic bytes
# (bench.moe_ncu), and the two kernels' GPU tests.
#   bash bench/reference/run_mla_moe_probes.sh     # $OUT: mla/, tiles/, step/, pytest.log, all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/mla" "$OUT/tiles" "$OUT/step"
. bench/reference/gpu_host.sh
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  date -u; git log -1 --format=%h 2>/dev/null; } | tee "$OUT/card.txt"
timeout 150 python3 -m pytest -q tests/kernels/test_mla_decode.py tests/kernels/test_moe_gemm.py \
  > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"; tail -n 2 "$OUT/pytest.log"
timeout 150 python3 -m bench.mla_ncu "$OUT/mla" > "$OUT/mla/console.log" 2>&1; echo "mla rc=$?"
tail -n 8 "$OUT/mla/console.log"
timeout 150 python3 -m bench.moe_tiles_probe "$OUT/tiles" > "$OUT/tiles/console.log" 2>&1
echo "tiles rc=$?"
timeout 200 python3 -m bench.moe_ncu "$OUT/step" --models deepseek_v2_lite --batches 1,8 \
  > "$OUT/step/console.log" 2>&1; echo "step rc=$?"; head -n 4 "$OUT/step/console.log"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
