#!/usr/bin/env bash
# One short H100 call for latent attention's decode kernels (issue 39, item 2): the GPU tests of
# kernels.mla_decode (the transposed products too) and kernels.head_gemv, bench.head_gemv_probe
# (the per-head GEMV's tiles against cuBLAS's batched GEMM), bench.mla_tiles_probe --swapped
# (the shipped tile against the transposed products' tiles).
#   OUT=out bash bench/reference/run_mla_swap.sh   # $OUT: card.txt, pytest.log, head_gemv/, tiles/
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT/head_gemv" "$OUT/tiles"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_mla_decode.py \
  tests/kernels/test_head_gemv.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -n 3 "$OUT/pytest.log"
timeout 120 python3 -m bench.head_gemv_probe "$OUT/head_gemv" > "$OUT/head_gemv/console.log" 2>&1
echo "head_gemv rc=$?"; cat "$OUT/head_gemv/head_gemv.csv" "$OUT/head_gemv/head_gemv_tiles.csv"
timeout 300 python3 -m bench.mla_tiles_probe "$OUT/tiles" --swapped > "$OUT/tiles/console.log" 2>&1
echo "tiles rc=$?"; cat "$OUT/tiles/mla_tiles.md"; grep -c error "$OUT/tiles/console.log"
grep error "$OUT/tiles/console.log" | head -3
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
