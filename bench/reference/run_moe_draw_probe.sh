#!/usr/bin/env bash
# Why a batch-8 decode step of many experts is slower under workload.routing=uniform than under
# the random router as built, at the same experts touched (moe_vs_dense on an H200, 2026-11-28:
# E128 k8 3.83 against 3.42 ms, E64 k8 3.12 against 2.94; E8-E32 within 0.6%): OLMoE-1B-7B's
# shape at E128 and E64, batch 8, prompt 1024, 64 new tokens, each routing, profile=modules (each
# graph replay's kernels with their durations: kernels_decode.json); first the MoE kernels' GPU
# tests and bench.moe_draw_probe (the routing kernels with and without the draw). Then, with EXP set, that
# experiment under both routings (bench/reference/run_moe_fronts.sh). EXPERTS: the expert counts
# ("128 64"); ROUTINGS ("uniform router"); TESTS_K: a pytest -k selection of the tests.
#   OUT=DIR bash bench/reference/run_moe_draw_probe.sh   # $OUT/all.tgz
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-out}"); mkdir -p "$OUT"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_moe_gemm.py \
  ${TESTS_K:+-k "$TESTS_K"} > "$OUT/tests.txt" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.txt"; tail -n 2 "$OUT/tests.txt"
timeout 120 python3 -m bench.moe_draw_probe "$OUT/draw_probe.csv" > "$OUT/draw_probe.log" 2>&1
echo "draw probe rc=$?"; cat "$OUT/draw_probe.log" | tail -n 16
R=$OUT/runs
for E in ${EXPERTS:-128 64}; do
  for routing in ${ROUTINGS:-uniform router}; do
    name=e${E}_${routing}; mkdir -p "$OUT/$name"  # (a study's folder is its name in lower case)
    timeout "${T:-110}" python3 -m sweep model=olmoe_1b_7b model.n_experts=$E workload=moe_decode \
      workload.routing=$routing profile=modules study.name=$name results_dir="$R" \
      > "$OUT/$name/console.log" 2>&1
    echo "$name rc=$?"; grep -E "decode [0-9]" "$OUT/$name/console.log" | tail -n 1
    d=$(ls -d "$R/$name"* 2>/dev/null | head -n 1)
    [ -n "$d" ] && cp "$d/trials.csv" "$OUT/$name/" && cp "$d"/trials/*/modules/kernels_*.json \
      "$d"/trials/*/modules/*.csv "$OUT/$name/" 2>/dev/null
    ls "$d"/trials/*/modules/ 2>/dev/null | head -n 20
  done
done
rm -rf "$R"
[ -n "${EXP:-}" ] && OUT=$OUT/fronts EXP=$EXP bash bench/reference/run_moe_fronts.sh
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
