#!/usr/bin/env bash
# The MoE presets' batch-1 rows on the tree as it is (issue 38 item 2: decode against the
# touched-bytes roofline), and the frozen MoE set's Qwen3-30B-A3B batch-1 x 512 pair measured
# with each token's experts drawn uniformly (workload.routing=uniform) beside the router as built:
# does the random router's collapse explain that pair's TTFT priced +48%? And OLMoE-1B-7B under
# routing_skew 1. First the MoE kernels' tests on the GPU (the fused routing's draw among them).
# One study per run (kernels=triton, mode=cudagraph, prompt 512, 64 new tokens); the calibration
# entries a run lacks are measured by the first and kept for the rest (one results_dir: its
# calibration cache).
# EXTRA: overrides for every run (EXTRA=profile=modules: each run's kernels, kernels_*.json);
# SKIP_TESTS=1: the runs alone; ONLY=REGEX: only the runs whose name it matches (e.g. olmoe_b1|qwen3_b1).
#   OUT=DIR bash bench/reference/run_moe_routing.sh   # $OUT/all.tgz: <run>/trials.csv, console.log
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout "${TEST_TIMEOUT:-120}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_gemm.py \
    > "$OUT/tests.txt" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.txt"; tail -n 2 "$OUT/tests.txt"
fi
run() {  # run NAME TIMEOUT OVERRIDES...
  local name=$1 t=$2; shift 2
  if [ -n "${ONLY:-}" ] && ! [[ "$name" =~ ^(${ONLY})$ ]]; then return; fi
  mkdir -p "$OUT/$name"
  timeout "$t" python3 -m sweep workload.batch=1 workload.prompt_len=512 workload.new_tokens=64 \
    study.name="$name" results_dir="$OUT/runs" ${EXTRA:-} "$@" > "$OUT/$name/console.log" 2>&1
  echo "$name rc=$?" | tee -a "$OUT/$name/console.log"; grep -E "decode [0-9]" "$OUT/$name/console.log" | tail -n 1
  local d; d=$(ls -d "$OUT/runs/$name"* 2>/dev/null | head -n 1)
  [ -n "$d" ] && cp "$d/trials.csv" "$OUT/$name/" && cp "$d"/trials/*/modules/kernels_*.json \
    "$OUT/$name/" 2>/dev/null
}
run olmoe_b1 "${T1:-220}" model=olmoe_1b_7b
run qwen3_b1 "${T2:-170}" model=qwen3_30b_a3b
run qwen3_b1_uniform "${T3:-130}" model=qwen3_30b_a3b workload.routing=uniform
run olmoe_b1_skew1 "${T4:-100}" model=olmoe_1b_7b workload.routing_skew=1.0
rm -rf "$OUT/runs"
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
