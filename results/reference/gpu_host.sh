# Sourced by the run_*.sh reference scripts: on the offline GPU host, install the wheels that
# shared/offline-wheels.sh put in .whl/ (optuna, hydra-core, nvtx, ...) into /tmp/site.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
