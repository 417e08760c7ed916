#!/usr/bin/env bash
# The held-out set measured and priced on this GPU (issue 24): HALF=even measures every other pair
# in file order (the half a 10-minute call holds), HALF=odd the others, no HALF all 44;
# NAMES="a b" only these pairs (a half's pairs that a call left unmeasured).
# SET=development: the development set instead (8 pairs); CAL=FILE.json prices from another
# device's calibration (transferred by this device's ceilings) and measures no calibration.
#   bash bench/reference/run_heldout.sh          (outputs to $OUT or ./out)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
. bench/reference/gpu_host.sh
names=${NAMES:-$(python3 -c "
import yaml; p=yaml.safe_load(open('conf/validation/${SET:-heldout}.yaml'))['pairs']
h='${HALF:-}'; print(' '.join(x['name'] for i, x in enumerate(p)
      if not h or (i % 2 == 0) == (h == 'even')))")}
timeout "${VALIDATE_TIMEOUT:-540}" python3 -m sweep.cli.validate --set "${SET:-heldout}" --targets none \
  ${CAL:+--calibration "$CAL"} --only $names 2>&1 | tee "$OUT/validate.log"
d=$(ls -d results/validate/"${SET:-heldout}"-* | head -1)
cp "$d"/* "$OUT/" 2>/dev/null
cp results/calibration/*.json "$OUT/cal.json" 2>/dev/null; cp results/calibration/*.parquet "$OUT/cal.parquet" 2>/dev/null
cp results/ceilings/*.json "$OUT/ceilings.json"
