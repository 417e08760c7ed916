#!/usr/bin/env bash
# A kernel change to decode attention against the tree's kernel, on one machine, in one call:
# bench.attn_ab_probe with the tree's code, then with PATCH applied, twice each way (base, new,
# base, new), then a table of the medians per shape and tile.
#   PATCH=results/reference/decode_levers_h100/s30_trims/trims.patch OUT=out bash bench/reference/run_attn_ab.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
: "${PATCH:?PATCH: the change to measure, a git patch}"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
for tag in base new base2 new2; do
  case $tag in new*) git apply "$PATCH" || exit 1 ;; esac
  timeout ${AB_TIMEOUT:-150} python3 -m bench.attn_ab_probe "$OUT" "$tag" >> "$OUT/probe.log" 2>&1
  echo "$tag rc=$?"
  case $tag in new*) git apply -R "$PATCH" ;; esac
done
python3 - "$OUT" <<'PY'
import glob, sys, pandas as pd
k = pd.concat([pd.read_csv(f) for f in glob.glob(f"{sys.argv[1]}/kernels_*.csv")])
k["side"] = k["tag"].str.rstrip("2")
t = k.groupby(["shape", "tile", "side"])["us"].median().unstack("side")
t["change_pct"] = (t["new"] / t["base"] - 1) * 100
print(t.round(2).to_string())
print("max err", k.groupby("side")["max_abs_err"].max().to_dict())
PY
(cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
