#!/usr/bin/env bash
# The GPU stage of scripts/test.sh: horovod._core's device-tensor intake and horovod.dlpack at 2
# ranks (any build), TensorFlow's "GPU" device over the host-memory CUDA + NCCL stand-in
# (test_tf_device.py), then the GPU path on the stand-in at 2 and 3 ranks (test_gpu_suite.py).
# Exit 77 (the stage reads "skipped") after the intake tests passed when the stand-in library was
# not built (no nvcc / CUDA headers here) or the installed horovod._core has no CUDA backend; the
# line before says which.
#   HOROVOD_TEST_CUDA_STANDIN  the stand-in library (default: found under build/)
set -u
cd "$(dirname "$0")/../.." || exit 1
py=${PYTHON:-python3}

"$py" -m pytest -q -p no:cacheprovider tests/gpu/test_intake.py || exit 1
timeout 300 horovodrun -np 2 "$py" -m pytest -q -p no:cacheprovider tests/gpu/test_dlpack_helper.py \
  || exit 1

standin=${HOROVOD_TEST_CUDA_STANDIN:-}
if [ -z "$standin" ]; then
  standin=$(find build -name 'lib*standin*.so' -print -quit 2>/dev/null)
fi
if [ -z "$standin" ] || [ ! -f "$standin" ]; then
  echo "gpu tests: skipped: no CUDA stand-in library under build/ (it is built with nvcc's CUDA" \
       "headers; set HOROVOD_TEST_CUDA_STANDIN to use another)"
  exit 77
fi
# TensorFlow's "GPU" device over the stand-in (needs TensorFlow, not Horovod's CUDA backend; the
# file skips itself, saying why, without TensorFlow).
HOROVOD_TEST_CUDA_STANDIN=$(realpath "$standin") timeout 300 "$py" -m pytest -q -p no:cacheprovider \
  tests/gpu/test_tf_device.py || exit 1
if ! "$py" -c 'import sys; from horovod import _core; sys.exit(0 if _core.cuda_built() else 1)'; then
  echo "gpu tests: skipped: the installed horovod._core was built without the CUDA backend" \
       "(pip install . where nvcc is found builds it)"
  exit 77
fi
echo "gpu tests: stand-in $standin"
HOROVOD_TEST_CUDA_STANDIN=$(realpath "$standin") exec "$py" -m pytest -q --durations=8 \
  -p no:cacheprovider tests/gpu/test_gpu_suite.py
