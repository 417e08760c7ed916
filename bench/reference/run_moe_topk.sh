#!/usr/bin/env bash
# The fused routing's top k in one reduction a pick (kernels/moe_align.py `_topk_rows`), before
# and after on one machine: the MoE routing kernels' GPU tests on the tree, then
# bench.moe_draw_probe (router_route and route_align, cold in a CUDA graph) and
# bench.moe_step_probe's pdl set (OLMoE-1B-7B and Qwen3-30B-A3B batch-1 steps) on the tree
# ("after") and with BEFORE (a copy of the earlier kernels/moe_align.py) in its place ("before"),
# the two alternating. $OUT/all.tgz: tests.txt, {after,before}_{draw,step}.{csv,log}.
#   BEFORE=path/to/moe_align.py OUT=DIR bash bench/reference/run_moe_topk.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_gemm.py \
  -k "route or router or ties or draw or skew or graph" > "$OUT/tests.txt" 2>&1
echo "tests rc=$?" | tee -a "$OUT/tests.txt"; tail -n 2 "$OUT/tests.txt"
cp kernels/moe_align.py "$OUT/after_moe_align.py"
swap() { if [ "$1" = before ]; then cp "$BEFORE" kernels/moe_align.py; else cp "$OUT/after_moe_align.py" kernels/moe_align.py; fi; }
for v in after before; do
  swap $v
  timeout 100 python3 -m bench.moe_draw_probe "$OUT/${v}_draw.csv" > "$OUT/${v}_draw.log" 2>&1
  echo "$v draw rc=$?"; grep "^{" "$OUT/${v}_draw.log" | head -n 12
done
for v in after before; do
  swap $v
  timeout "${STEP_TIMEOUT:-150}" python3 -m bench.moe_step_probe "$OUT/${v}_step.csv" \
    "${DESIGNS:-olmoe_1b_7b:1,qwen3_30b_a3b:1}" pdl > "$OUT/${v}_step.log" 2>&1
  echo "$v step rc=$?"; grep "^{" "$OUT/${v}_step.log" | tail -n 6
done
swap after
rm -f "$OUT/after_moe_align.py"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
