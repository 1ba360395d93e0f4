#!/usr/bin/env bash
# The full test suite: set-up, the include-layering check (docs/architecture.md), the Python lint
# (ruff) and the C++ format check (scripts/format.sh --check), C++ unit tests (also under
# ASan+UBSan; ctest also runs the multi-process and network-namespace tests), launcher tests
# (incl. ssh across namespaces),
# Python tests under horovodrun, Slurm (a private slurmctld + slurmd), the deploy/ recipes'
# validators, a short fault-injection gate, benchmark smoke.
# Every stage is bounded by a timeout so a hang fails fast; pytest stages run every test (no -x),
# so one failure does not hide the rest. Usage: scripts/test.sh [--quick] [--stress]
#   --quick   skips the sanitizer build and the benchmark smoke.
#   --stress  runs the test stages beside a CPU hog: a busy loop on every core (stress-ng's cpu
#             stressor when installed, else one bash loop per core), started before the first
#             stage and killed on exit; paused (SIGSTOP) during the set-up and build stages,
#             which only get slower under it. Tests that depend on timing must pass this way.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
stress=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --stress) stress=1 ;;
    *) echo "usage: scripts/test.sh [--quick] [--stress]" >&2; exit 2 ;;
  esac
done
jobs=$(nproc)
failed=()

hog_pids=()
stop_hog() {
  local pid
  for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${hog_pids[@]}"; do wait "$pid" 2>/dev/null; done
  hog_pids=()
}
if [ $stress = 1 ]; then
  trap stop_hog EXIT
  trap 'stop_hog; exit 130' INT
  trap 'stop_hog; exit 143' TERM
  if command -v stress-ng >/dev/null 2>&1; then
    stress-ng --cpu "$jobs" --quiet >/dev/null 2>&1 &
    hog_pids+=($!)
  else
    for _ in $(seq "$jobs"); do
      bash -c 'while :; do :; done' &
      hog_pids+=($!)
    done
  fi
  echo "=== stress: a busy loop on each of $jobs cores (pids ${hog_pids[*]})"
fi

hog_signal() {  # hog_signal STOP|CONT
  local pid
  for pid in "${hog_pids[@]}"; do pkill "-$1" -P "$pid" 2>/dev/null; kill "-$1" "$pid" 2>/dev/null; done
}

stage() {  # stage <name> <timeout-seconds> <command...>
  local name=$1 limit=$2
  shift 2
  echo "=== $name"
  local start=$SECONDS
  local builds=0
  case "$name" in setup|build*) builds=1 ;; esac
  [ $builds = 1 ] && hog_signal STOP
  timeout --signal=TERM --kill-after=10 "$limit" "$@"
  local rc=$?
  [ $builds = 1 ] && hog_signal CONT
  if [ $rc = 0 ]; then
    echo "=== $name: ok ($((SECONDS - start)) s)"
  elif [ $rc = 77 ]; then
    echo "=== $name: skipped (this machine cannot run it)"
  else
    echo "=== $name: FAILED (exit $rc, $((SECONDS - start)) s)"
    failed+=("$name")
  fi
}

stage "setup" 1500 ./scripts/setup.sh || true
stage "layering" 60 python3 scripts/check_layering.py
stage "ruff" 120 python3 -m ruff check python tests bench scripts examples
stage "clang-format" 300 scripts/format.sh --check

stage "build" 1200 bash -c "cmake -S . -B build -G Ninja -DHOROVOD_BUILD_TESTS=ON >/dev/null && ninja -C build -j$jobs"
stage "unit tests" 900 ctest --test-dir build --output-on-failure --timeout 300 -j$jobs

if [ $quick = 0 ]; then
  # -O1 with line tables only (what the sanitizers' reports need): a third less compile time
  # than RelWithDebInfo's -O2 -g on this, the longest stage. The CUDA kernels (not instrumented,
  # never run without a GPU) for one architecture only: the full list takes minutes of nvcc.
  stage "build (asan+ubsan)" 1500 bash -c "cmake -S . -B build-asan -G Ninja -DHOROVOD_BUILD_TESTS=ON \
    -DHOROVOD_BUILD_BENCH=OFF -DHOROVOD_BUILD_EXAMPLES=OFF -DHOROVOD_SANITIZE=address,undefined \
    -DHOROVOD_CUDA_ARCHITECTURES=75-real \
    -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS='-O1 -g1' >/dev/null && ninja -C build-asan -j$jobs"
  stage "unit tests (asan+ubsan)" 1200 env ASAN_OPTIONS=detect_leaks=1 \
    ctest --test-dir build-asan --output-on-failure --timeout 600 -j$jobs
  # ThreadSanitizer on the threaded core: the engine (its background thread and the callers that
  # drive it, the liveness watch, completion callbacks, process sets, init/shutdown/init), the
  # timeline writer, the autotuner, the shared-memory transport and its waiter, the TCP
  # transport (its mesh acceptor, keep-alive, posts from other threads) and the rendezvous
  # store's server thread. Only these test binaries are built (~5 min of tests on 2 cores).
  # Suppressions (tests/tsan.supp) are for third-party code only.
  tsan_layers='engine|timeline|autotune|transport_shm|transport_tcp|store'
  tsan_bins=$(echo "$tsan_layers" | sed 's/|/ /g; s/[a-z_]*/test_&/g')
  stage "build (tsan)" 1500 bash -c "cmake -S . -B build-tsan -G Ninja -DHOROVOD_BUILD_TESTS=ON \
    -DHOROVOD_BUILD_BENCH=OFF -DHOROVOD_BUILD_EXAMPLES=OFF -DHOROVOD_SANITIZE=thread \
    -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS='-O1 -g1' >/dev/null && \
    ninja -C build-tsan -j$jobs $tsan_bins"
  stage "unit tests (tsan)" 600 env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir build-tsan -L "^($tsan_layers)\$" --output-on-failure --timeout 300 -j$jobs
  # libFuzzer: every decoder of outside input for ~20 s on its committed corpus (scripts/fuzz.sh;
  # tests/fuzz). Skipped (77) only when clang cannot build libFuzzer programs.
  stage "fuzz (20 s per target)" 900 scripts/fuzz.sh --seconds 20
fi

# The installed launcher itself, not a wrapper in front of it (pyenv puts a shell-script shim on PATH;
# tests that copy the binary next to a fake python3 need the real executable).
installed_horovodrun() {
  local scripts
  scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null)
  if [ -n "$scripts" ] && [ -x "$scripts/horovodrun" ]; then echo "$scripts/horovodrun"; else command -v horovodrun; fi
}

if [ -d tests/launcher ]; then
  stage "launcher tests" 1500 env HOROVODRUN="$(installed_horovodrun)" python3 -m pytest -q --durations=8 tests/launcher
fi
# Ray and Spark start real clusters (a local Ray, two-node Rays, one across network namespaces,
# Spark local[2] and local-cluster; the Keras estimator's processes each import TensorFlow; the
# Lightning estimator's four fits, ~3 min of it): their own stage and time bound (5.3 min on a
# quiet 2-core machine before the Lightning estimator, up to ~15 under load).
ray_spark_tests=(tests/python/test_rendezvous_server.py tests/python/test_ray.py tests/python/test_ray_cluster.py
                 tests/python/test_ray_netns.py
                 tests/python/test_spark.py tests/python/test_spark_elastic.py tests/python/test_spark_estimator.py
                 tests/python/test_spark_keras_estimator.py tests/python/test_spark_lightning.py
                 tests/python/test_spark_memory.py)
# Plain mpirun.openmpi / mpiexec.mpich / srun-style launches without horovodrun, both data planes
# (HOROVOD_CPU_OPERATIONS=mpi too: Horovod's torch suite under each MPI) (3.3 min quiet, ~10 loaded).
mpi_tests=(tests/python/test_mpi.py)
if [ -d tests/python ]; then
  stage "python tests" 2400 python3 -m pytest -q --durations=8 tests/python "${ray_spark_tests[@]/#/--ignore=}" \
    "${mpi_tests[@]/#/--ignore=}"
  stage "ray and spark tests" 1800 python3 -m pytest -q --durations=8 "${ray_spark_tests[@]}"
  stage "mpi tests" 1500 python3 -m pytest -q --durations=8 "${mpi_tests[@]}"
fi
# The GPU path without a GPU: device-tensor intake, then every collective at 2 and 3 ranks on the
# host-memory CUDA + NCCL stand-in built in build/ (skipped, saying why, where it cannot be built).
if [ -x tests/gpu/run_suite.sh ]; then
  stage "gpu tests (stand-in)" 1200 tests/gpu/run_suite.sh
fi
# A private one-node Slurm cluster: srun's environment, srun / sbatch / salloc training.
if [ -d tests/slurm ]; then
  stage "slurm tests" 900 python3 -m pytest -q --durations=8 tests/slurm
fi
# The deploy/ recipes, each checked by a real validator (Kubernetes schemas, Helm, hadolint, ...).
if [ -d tests/deploy ]; then
  stage "deploy recipes" 300 python3 -m pytest -q tests/deploy
fi
if [ -x bench/fault_gate.py ]; then
  # Ten randomized fault runs (docs/failures.md); the committed 200-run result stays untouched.
  stage "fault gate (10 runs)" 900 env HOROVODRUN="$(installed_horovodrun)" \
    python3 bench/fault_gate.py --runs 10 --out build/fault_gate_ci.md
fi
# horovod.mxnet in its own MXNet 1.9.1 environment with this build (skipped, saying so, when
# that environment is missing): tests at 2 and 3 ranks, the Gluon example at 2.
stage "mxnet 1.9.1 (same build)" 900 scripts/check_mxnet.sh
if [ $quick = 0 ]; then
  # The same build against an older TensorFlow (downloads TensorFlow 2.16 into a venv).
  stage "tensorflow 2.16 (same build)" 900 scripts/check_tf_version.sh 2.16.2
fi
if [ $quick = 0 ] && [ -x bench/smoke.sh ]; then
  stage "bench smoke" 300 bench/smoke.sh
fi
if [ $quick = 0 ] && [ -x bench/soak.py ]; then
  # A 3-minute soak (2 ranks, timeline and autotune on): no resource of a rank or of horovodrun
  # may grow more than 5 % after the warm-up (bench/results/soak.md holds the 60-minute run).
  stage "soak (3 min)" 420 env HOROVODRUN="$(installed_horovodrun)" \
    python3 bench/soak.py --minutes 3 --interval 10 --out build/soak_ci.md
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED stages: ${failed[*]}"
  exit 1
fi
echo "all stages passed"
