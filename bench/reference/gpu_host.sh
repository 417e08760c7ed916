# Sourced by the run_*.sh reference scripts: on the offline GPU host, install the wheels that
# shared/offline-wheels.sh put in .whl/ (optuna, hydra-core, nvtx, ...) into /tmp/site; once per
# call (a script sourced by another finds /tmp/site on PYTHONPATH already).
if [ -d .whl ] && [[ ":${PYTHONPATH:-}:" != *":/tmp/site:"* ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi

# gpu_card FILE: the card (name, driver, max clocks), torch and Triton, the UTC date, written to
# FILE and the console: the head of a run script's record
gpu_card() {
  { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    date -u +%FT%TZ; } | tee "$1"
}

# probe NAME TIMEOUT_S MODULE: run `python3 -m MODULE $OUT/NAME` under a timeout, its card in
# $OUT/NAME/device.txt, console in $OUT/NAME/console.log, exit code and wall in walls.txt; then
# $OUT/NAME packed as $OUT/NAME.tgz (a device call returns at most 8 files)
probe() {
  local name=$1 limit=$2 module=$3 t0; mkdir -p "$OUT/$name"
  gpu_card "$OUT/$name/device.txt"; t0=$(date +%s)
  timeout "$limit" python3 -m "$module" "$OUT/$name" > "$OUT/$name/console.log" 2>&1
  echo "$name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a "$OUT/$name/walls.txt"
}
probe_pack() { (cd "$OUT" && tar czf "$1.tgz" --remove-files "$1"); }
