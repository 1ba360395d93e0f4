#!/usr/bin/env bash
# The one-build claim: runs the TensorFlow tests with the installed horovod build (the same
# _core and TensorFlow kernel library, not rebuilt) against another TensorFlow release, in a
# virtual environment of its own.
#
#   scripts/check_tf_version.sh [VERSION]       default 2.16.2
#
# The environment is kept (HOROVOD_TF_VENV, default /tmp/horovod-tf-VERSION) so a rerun does not
# download TensorFlow again.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-2.16.2}
venv=${HOROVOD_TF_VENV:-/tmp/horovod-tf-$version}
if ! "$venv/bin/python" -c "import tensorflow as tf; assert tf.__version__ == '$version'" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "tensorflow-cpu==$version" pytest \
    cloudpickle pyyaml packaging 2>&1 | grep -v -E "^WARNING: (Running pip as|Location)" || true
fi
# The installed horovod package, alone on the path (not the rest of this Python's packages).
pkg=$(python3 -c 'import horovod, os; print(os.path.dirname(os.path.abspath(horovod.__file__)))')
staged=$(mktemp -d)
trap 'rm -rf "$staged"' EXIT
cp -r "$pkg" "$staged/horovod"
echo "check_tf_version: $("$venv/bin/python" -c 'import tensorflow as tf; print("TensorFlow", tf.__version__)') with the horovod build in $pkg"
cd tests/python
PYTHONPATH="$staged" HOROVOD_TENSORFLOW_OPS=kernels TF_CPP_MIN_LOG_LEVEL=3 \
  timeout 900 horovodrun -np 2 "$venv/bin/python" -m pytest -x -q -p no:cacheprovider test_tensorflow.py
# Independent ops created in different orders on each rank, one inter-op thread: the kernels'
# deferred completion (a copy of TensorFlow's done callback) checked on this TensorFlow too.
PYTHONPATH="$staged" HOROVOD_TENSORFLOW_OPS=kernels TF_CPP_MIN_LOG_LEVEL=3 \
  timeout 600 horovodrun -np 2 "$venv/bin/python" tf_independent_ops_worker.py 1
