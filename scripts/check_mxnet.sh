#!/usr/bin/env bash
# horovod.mxnet on MXNet 1.9.1 (retired upstream; it needs numpy < 1.24), in a virtual
# environment of its own, with the installed horovod build (the same _core, not rebuilt): the
# MXNet tests under horovodrun at 2 and 3 ranks, then the Gluon example at 2 ranks.
#
#   scripts/check_mxnet.sh
#
# The environment is HOROVOD_MXNET_VENV (default /tmp/horovod-mxnet-1.9.1), made by
# scripts/setup.sh. Without it this script says so and exits 77 (the stage reads "skipped").
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${HOROVOD_MXNET_VENV:-/tmp/horovod-mxnet-1.9.1}
if ! "$venv/bin/python" -c "import mxnet" 2>/dev/null; then
  echo "check_mxnet: SKIPPED: no MXNet environment at $venv (scripts/setup.sh makes it; set HOROVOD_MXNET_VENV to use another)"
  exit 77
fi
# The installed horovod package, alone on the path (not the rest of this Python's packages).
pkg=$(python3 -c 'import horovod, os; print(os.path.dirname(os.path.abspath(horovod.__file__)))')
staged=$(mktemp -d)
trap 'rm -rf "$staged"' EXIT
cp -r "$pkg" "$staged/horovod"
echo "check_mxnet: $("$venv/bin/python" -c 'import mxnet, numpy; print("MXNet", mxnet.__version__, "numpy", numpy.__version__)') with the horovod build in $pkg"
for np_ in 2 3; do
  PYTHONPATH="$staged" HOROVOD_GLOO_TIMEOUT_SECONDS=60 timeout 600 \
    horovodrun -np "$np_" "$venv/bin/python" -m pytest -x -q -p no:cacheprovider tests/mxnet/test_mxnet.py
done
PYTHONPATH="$staged" timeout 600 horovodrun -np 2 "$venv/bin/python" examples/mxnet/mxnet_gluon_digits.py
