#!/usr/bin/env bash
# The checks that need a real GPU, as one script for a machine lent for minutes (one GPU, python3
# with torch+CUDA, nvcc, the nvidia-nccl wheel, no network). Under 8 minutes; each step bounded,
# the whole run by a deadline (HVD_DEVICE_DEADLINE_S, default 450 s). From the repository root:
#
#   tests/gpu/run_on_device.sh          (logs under $OUT when set, else /tmp/hvd-device)
#
# Steps:
#   build          pip install . with this machine's python (no build isolation: its own
#                  scikit-build-core, nanobind, cmake, ninja, nvcc, NCCL headers; nothing built
#                  elsewhere is used), then horovodrun --check-build and cuda_built()/nccl_built()
#   kernels        the CUDA kernels' unit tests (ctest targets named *kernel*test*, built here)
#   torch-host-np2 horovod.torch CUDA tensors through every collective, 2 ranks on the one GPU
#                  (HOROVOD_GPU_OPERATIONS=host: the host-staged path)
#   torch-nccl-np1 the same at 1 rank through NCCL (HOROVOD_GPU_OPERATIONS=nccl)
#   train-np2      a 2-rank training step on CUDA (broadcast_parameters, DistributedOptimizer)
#   suite-np2      tests/gpu/test_collectives.py on the real CUDA runtime (the stand-in suite)
#   bench          bench/gpu_bench.py: allreduce busbw host-staged vs gloo-CUDA at 2 ranks, and the
#                  fusion kernels vs a device-to-device copy
# Prints one summary line: "run_on_device: <card>, <date>: step=PASS|FAIL|SKIP ... | bench ...".
set -u
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/hvd-device}
mkdir -p "$out"
py=${PYTHON:-python3}
deadline=$((SECONDS + ${HVD_DEVICE_DEADLINE_S:-450}))
export PYTHONUNBUFFERED=1 HOROVOD_GLOO_TIMEOUT_SECONDS=60
summary=()
bench=()

# step <name> <limit-seconds> <command...>: runs it under the smaller of its limit and what is
# left of the deadline, output to $out/<name>.log (and the tail to stdout on failure).
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 20 ]; then
    summary+=("$name=SKIP(deadline)")
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name (limit ${limit} s)"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then
    summary+=("$name=PASS")
    echo "=== $name: ok ($((SECONDS - start)) s)"
  else
    summary+=("$name=FAIL($rc)")
    echo "=== $name: FAILED (exit $rc, $((SECONDS - start)) s)"
    tail -n 40 "$out/$name.log"
  fi
  return $rc
}

scripts=$($py -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
export PATH="$scripts:$PATH"
card=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
date=$(date -u +%Y-%m-%d)

if step build 300 env CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$py" -m pip install -v \
    --no-build-isolation --no-deps --no-cache-dir -C build-dir=/tmp/hvd-device-build \
    -C cmake.define.HOROVOD_WITH_CUDA=ON .; then
  horovodrun --check-build >"$out/check_build.txt" 2>&1
  "$py" -c 'import horovod.torch as h; print("cuda_built", h.cuda_built(), "nccl_built", h.nccl_built())' >>"$out/check_build.txt" 2>&1
  cat "$out/check_build.txt"

  # shellcheck disable=SC2317  # run through `bash -c kernel_tests` (timeout runs no functions)
  kernel_tests() {
    cmake -S . -B /tmp/hvd-device-ctest -G Ninja -DHOROVOD_BUILD_TESTS=ON -DHOROVOD_WITH_CUDA=ON \
      -DHOROVOD_BUILD_BENCH=OFF -DHOROVOD_BUILD_EXAMPLES=OFF >/dev/null || return 1
    local targets
    targets=$(ninja -C /tmp/hvd-device-ctest -t targets all | grep -oE '^[A-Za-z0-9_]*kernel[A-Za-z0-9_]*test[A-Za-z0-9_]*:' | tr -d ':' | sort -u)
    if [ -z "$targets" ]; then
      echo "no CUDA kernel test targets (*kernel*test*) in this tree"
      return 3
    fi
    # shellcheck disable=SC2086
    ninja -C /tmp/hvd-device-ctest -j"$(nproc)" $targets || return 1
    ctest --test-dir /tmp/hvd-device-ctest --output-on-failure --timeout 120 -R kernel
  }
  export -f kernel_tests
  step kernels 180 bash -c kernel_tests
  step torch-host-np2 90 env HOROVOD_GPU_OPERATIONS=host \
    horovodrun -np 2 "$py" tests/gpu/torch_cuda_worker.py collectives
  step torch-nccl-np1 60 env HOROVOD_GPU_OPERATIONS=nccl \
    horovodrun -np 1 "$py" tests/gpu/torch_cuda_worker.py collectives
  step train-np2 60 env HOROVOD_GPU_OPERATIONS=host \
    horovodrun -np 2 "$py" tests/gpu/torch_cuda_worker.py train
  step suite-np2 120 env HOROVOD_GPU_OPERATIONS=host \
    horovodrun -np 2 "$py" -m pytest -x -q -p no:cacheprovider tests/gpu/test_collectives.py
  if step bench-allreduce 120 env HOROVOD_GPU_OPERATIONS=host \
      horovodrun -np 2 "$py" bench/gpu_bench.py allreduce; then
    bench+=("$(grep -h 'gpu_bench allreduce:' "$out/bench-allreduce.log" | sed 's/^\[0\]<stdout>://')")
  fi
  if step bench-kernels 60 "$py" bench/gpu_bench.py kernels; then
    bench+=("$(grep -h 'gpu_bench kernels:' "$out/bench-kernels.log")")
  fi
fi

line="run_on_device: ${card:-no nvidia-smi}, $date: ${summary[*]}"
[ ${#bench[@]} -gt 0 ] && line="$line | ${bench[*]}"
echo "$line" | tee "$out/summary.txt"
case "${summary[*]}" in *FAIL*|*SKIP*) exit 1 ;; esac
exit 0
