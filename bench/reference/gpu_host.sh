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
