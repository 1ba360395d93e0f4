"""Runs the distributed GPU test files under ``horovodrun -np 2`` and ``-np 3`` on the stand-in.

The loader is pointed at the host-memory CUDA + NCCL stand-in (HOROVOD_CUDA_LIBRARY and
HOROVOD_NCCL_LIBRARY = HOROVOD_TEST_CUDA_STANDIN, which scripts/test.sh's GPU stage sets after
building it), once per data path: HOROVOD_GPU_OPERATIONS=nccl (the NCCL backend over the
stand-in's NCCL, a stand-in GPU per rank) and =host (the host-staged backend, every rank on one
stand-in GPU). Each run is bounded by
HOROVOD_TEST_TIMEOUT seconds (default 420); on timeout the launcher's process group is killed and
the test fails with the output's tail. Without a stand-in or a build with the CUDA backend the
tests are skipped, saying which is missing.
"""

import os
import shutil
import signal
import subprocess
import sys

import pytest

from horovod import _core

from conftest import DISTRIBUTED_FILES

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '420'))
SIZES = [int(n) for n in os.environ.get('HOROVOD_TEST_SIZES', '2,3').split(',')]
STANDIN = os.environ.get('HOROVOD_TEST_CUDA_STANDIN', '')
PATHS = os.environ.get('HOROVOD_TEST_GPU_PATHS', 'nccl,host').split(',')
# The collective backend each path must have run (engine counters, test_collectives.py's last
# test).
BACKENDS = {'nccl': 'nccl', 'host': 'cuda_staged'}
# init()'s refusal of HOROVOD_GPU_OPERATIONS=nccl by a build without the NCCL backend: that path
# is then reported as skipped, naming why.
NO_NCCL_BACKEND = 'HOROVOD_GPU_OPERATIONS=nccl: this build has no NCCL backend'



def _missing():
    if not _core.cuda_built():
        return 'this build of horovod._core has no CUDA backend (cuda_built() is False)'
    if not STANDIN or not os.path.exists(STANDIN):
        return 'no CUDA stand-in library (HOROVOD_TEST_CUDA_STANDIN=%r)' % STANDIN
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def _tail(path, limit=12000):
    with open(path, errors='replace') as f:
        return f.read()[-limit:]


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('np_', SIZES, ids=lambda n: 'np%d' % n)
@pytest.mark.parametrize('test_file', DISTRIBUTED_FILES)
def test_under_launcher(test_file, np_, path, tmp_path):
    _run_under_launcher(test_file, np_, path, tmp_path)


@pytest.mark.parametrize('path', PATHS)
def test_outputs_on_a_device_without_memory_pools(path, tmp_path):
    # Allgather and alltoall outputs come from a stream-ordered pool; a device that has none
    # (cudaDevAttrMemoryPoolsSupported = 0) gets cudaMalloc/cudaFree outputs instead.
    _run_under_launcher('test_collectives.py', 2, path, tmp_path, {'HVD_STANDIN_NO_MEMPOOLS': '1'},
                        'allgather or alltoall')


@pytest.mark.parametrize('path', PATHS)
def test_tensorflow_gpu_kernels(path, tmp_path):
    # horovod.tensorflow's GPU kernels on TensorFlow GPU tensors (the stand-in's PluggableDevice,
    # tf_standin_gpu); two ranks: the collectives themselves are covered at 3 by the files above.
    pytest.importorskip('tensorflow')
    _run_under_launcher('test_tensorflow_gpu.py', 2, path, tmp_path)


@pytest.mark.parametrize('path', PATHS)
def test_tensorflow_gpu_kernels_wait_for_tensorflows_gpu_producers(path, tmp_path):
    # A collective consuming a TensorFlow GPU kernel's output while TensorFlow's streams are held
    # back (test_tensorflow_gpu_ordering.py).
    pytest.importorskip('tensorflow')
    _run_under_launcher('test_tensorflow_gpu_ordering.py', 2, path, tmp_path)


def _run_under_launcher(test_file, np_, path, tmp_path, extra_env=None, select=None):
    horovodrun = shutil.which('horovodrun')
    assert horovodrun, 'horovodrun is not on PATH'
    # NCCL: a GPU per rank (NCCL needs one); host-staged: every rank on one GPU (the case it
    # exists for).
    devices = np_ if path == 'nccl' else 1
    env = dict(os.environ, PYTHONUNBUFFERED='1', HOROVOD_CUDA_LIBRARY=STANDIN,
               HOROVOD_NCCL_LIBRARY=STANDIN, HOROVOD_GPU_OPERATIONS=path,
               HVD_STANDIN_DEVICES=str(devices), HOROVOD_TEST_GPU_BACKEND=BACKENDS[path], **(extra_env or {}))
    env.setdefault('HOROVOD_GLOO_TIMEOUT_SECONDS', '60')
    cmd = [horovodrun, '-np', str(np_), sys.executable, '-m', 'pytest', '-x', '-q', '-p',
           'no:cacheprovider', os.path.join(HERE, test_file)] + (['-k', select] if select else [])
    log_path = tmp_path / 'output.log'
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=HERE)
        try:
            code = proc.wait(timeout=TIMEOUT)
            why = 'exit code %d' % code
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code, why = -1, 'timed out after %d s' % TIMEOUT
    if code != 0 and path == 'nccl' and NO_NCCL_BACKEND in _tail(log_path):
        pytest.skip('this build has no NCCL backend (init refused HOROVOD_GPU_OPERATIONS=nccl)')
    if code != 0:
        pytest.fail('%s at -np %d on the %s path: %s\n%s' % (test_file, np_, path, why,
                                                              _tail(log_path)))
