#!/usr/bin/env bash
# A kernel change to decode attention against the tree's kernel, on one machine, in one call:
# bench.attn_ab_probe with the tree's code ("base"), with PATCH applied ("new") and, if given,
# with PATCH2 on top of it ("both"), two rounds in turn, then the medians per shape and tile
# (NO_TAR=1: $OUT left untarred, for a script that reads it after).
#   PATCH=results/reference/decode_levers_h100/s30_trims/trims.patch OUT=out bash bench/reference/run_attn_ab.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
: "${PATCH:?PATCH: the change to measure, a git patch}"
. bench/reference/gpu_host.sh
gpu_card "$OUT/card.txt"
for rnd in 1 2; do
  for side in base new ${PATCH2:+both}; do
    case $side in new) git apply "$PATCH" || exit 1 ;;
                  both) git apply "$PATCH" && git apply "$PATCH2" || exit 1 ;; esac
    timeout ${AB_TIMEOUT:-100} python3 -m bench.attn_ab_probe "$OUT" "${side}_$rnd" >> "$OUT/probe.log" 2>&1
    echo "${side}_$rnd rc=$?"
    case $side in new) git apply -R "$PATCH" ;;
                  both) git apply -R "$PATCH2" && git apply -R "$PATCH" ;; esac
  done
done
python3 - "$OUT" <<'PY'
import glob, sys, pandas as pd
k = pd.concat([pd.read_csv(f) for f in glob.glob(f"{sys.argv[1]}/kernels_*.csv")])
k["side"] = k["tag"].str.rsplit("_", n=1).str[0]
t = k.groupby(["shape", "tile", "side"])["us"].median().unstack("side")
for c in t.columns.drop("base"):
    t[f"{c}_pct"] = (t[c] / t["base"] - 1) * 100
print(t.round(2).to_string())
print("max err", k.groupby("side")["max_abs_err"].max().to_dict())
PY
[ -n "${NO_TAR:-}" ] || (cd "$OUT" && tar czf all.tgz --remove-files $(ls | grep -v all.tgz))
