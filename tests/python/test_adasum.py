"""Adasum on every data plane: adasum_scripts/adasum_worker.py on 2 and 4 ranks over shared
memory and TCP (HOROVOD_TRANSPORT) under horovodrun, and over MPI (HOROVOD_CPU_OPERATIONS=mpi)
under Open MPI's mpirun; 3 ranks are refused with Horovod's error. Each run is bounded by a
timeout that kills its process group. TensorFlow and Keras run in one case (their import dominates
the time, and their adapters reach the same core path on every data plane); torch runs in all.
"""

import os
import re
import shutil
import sys

import pytest
from launch_util import run_bounded, run_under_horovodrun

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, 'adasum_scripts', 'adasum_worker.py')
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '420'))

try:
    from horovod import _core
except ImportError:
    _core = None


def _frameworks(with_tf):
    names = ['torch']
    if with_tf:
        try:
            import tensorflow  # noqa: F401
            names += ['tf', 'keras']
        except ImportError:
            pass
    return names


def _expect_all_checks(code, out, np_, frameworks):
    assert code == 0, out[-8000:]
    # Lines may carry horovodrun's "[rank]<stdout>:" prefix.
    assert len(re.findall(r'\bDONE\b', out)) == np_, out[-8000:]
    oks = re.findall(r'\bOK (\w+)', out)
    expected = {'torch_identities_float16', 'torch_identities_bfloat16', 'torch_identities_float32',
                'torch_identities_float64', 'torch_extreme_magnitudes', 'torch_refusals',
                'torch_delta_optimizer_step', 'torch_delta_optimizer_converges'}
    if 'tf' in frameworks:
        expected |= {'tf_identities_float16', 'tf_identities_bfloat16', 'tf_identities_float32',
                     'tf_identities_float64', 'tf_gradient_tape', 'tf_delta_optimizer',
                     'keras_allreduce'}
    for name in expected:
        assert oks.count(name) == np_, '%s passed on %d of %d ranks\n%s' % (
            name, oks.count(name), np_, out[-8000:])


@pytest.mark.parametrize('transport,np_', [('shm', 2), ('shm', 4), ('tcp', 2), ('tcp', 4)])
def test_adasum_over_horovods_data_plane(transport, np_):
    frameworks = _frameworks(with_tf=(transport, np_) == ('shm', 2))
    code, out = run_under_horovodrun([WORKER] + frameworks, TIMEOUT, np_=np_,
                                     env_extra={'HOROVOD_TRANSPORT': transport})
    _expect_all_checks(code, out, np_, frameworks)


@pytest.mark.parametrize('np_', [2, 4])
def test_adasum_over_mpi_data_plane(np_):
    if _core is None or not _core.mpi_built():
        pytest.skip('horovod._core has no MPI plugin (build with libopenmpi-dev installed)')
    mpirun = shutil.which('mpirun.openmpi')
    if mpirun is None:
        pytest.skip('mpirun.openmpi not found (apt-get install openmpi-bin)')
    frameworks = _frameworks(with_tf=False)
    cmd = [mpirun, '-np', str(np_), '--oversubscribe'] + (
        ['--allow-run-as-root'] if os.geteuid() == 0 else []) + [
        '-x', 'HOROVOD_CPU_OPERATIONS', '-x', 'HOROVOD_ADASUM_MPI_CHUNK_SIZE', '-x', 'HOROVOD_LOG_LEVEL',
        '-x', 'PYTHONUNBUFFERED', '-x', 'TF_CPP_MIN_LOG_LEVEL', sys.executable, WORKER] + frameworks
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('HOROVOD_', 'OMPI_', 'PMI_', 'PMIX_')) or k == 'HOROVOD_TEST_TIMEOUT'}
    # Small chunks, so that the exchanges of the larger tensors take several MPI messages.
    env.update(HOROVOD_CPU_OPERATIONS='mpi', HOROVOD_ADASUM_MPI_CHUNK_SIZE='4096',
               HOROVOD_LOG_LEVEL='debug', PYTHONUNBUFFERED='1', TF_CPP_MIN_LOG_LEVEL='3')
    code, out = run_bounded(cmd, env, TIMEOUT, cwd=HERE)
    assert 'MPI data plane (HOROVOD_CPU_OPERATIONS=mpi)' in out, out[-8000:]
    _expect_all_checks(code, out, np_, frameworks)


def test_adasum_on_three_ranks_is_refused():
    code_text = ('import torch, horovod.torch as hvd\n'
                 'hvd.init()\n'
                 'try:\n'
                 '    hvd.allreduce(torch.ones(4), op=hvd.Adasum)\n'
                 'except NotImplementedError as e:\n'
                 '    print("REFUSED", e, flush=True)\n')
    code, out = run_under_horovodrun(['-c', code_text], TIMEOUT, np_=3)
    assert code == 0, out[-8000:]
    assert out.count('REFUSED Running Adasum with non-power of 2 ranks is not supported yet.') == 3, \
        out[-8000:]


class _CudaTensor:
    """What the torch pre-check asks of a CUDA tensor (the torch CPU wheel cannot make one)."""
    is_cuda = True


@pytest.mark.parametrize('ranks,local_size,homogeneous,message', [
    (3, 2, False, 'Running GPU Adasum on heterogeneous cluster is not supported yet.'),
    (3, 1, True, 'Running GPU Adasum with non-power of 2 nodes is not supported yet.'),
    (6, 2, True, 'Running GPU Adasum with non-power of 2 nodes is not supported yet.'),
    (6, 3, True, None),  # two hosts of three ranks
    (3, 3, True, None),  # one host
])
def test_gpu_adasum_prechecks(monkeypatch, ranks, local_size, homogeneous, message):
    """Horovod's GPU Adasum refusals, raised before anything is sent: on hosts (the same number
    of ranks on each, a power-of-two number of them), not on the rank count; CPU tensors keep
    the rank-count refusal."""
    from horovod.common import ops
    from horovod.common.process_sets import global_process_set
    sizes = dict(job_size=lambda: ranks, local_size=lambda: local_size,
                 homogeneous=lambda: homogeneous)
    try:
        from horovod.torch import async_ops
    except ImportError:
        async_ops = None
    if async_ops is not None:
        monkeypatch.setattr(async_ops, 'size', sizes['job_size'])
        monkeypatch.setattr(async_ops, 'local_size', sizes['local_size'])
        monkeypatch.setattr(async_ops, 'is_homogeneous', sizes['homogeneous'])
    checks = [lambda: ops.check_adasum(ops.Adasum, 0, gpu=True, **sizes)]
    if async_ops is not None:
        checks.append(lambda: async_ops._adasum_checks(ops.Adasum, global_process_set,
                                                       _CudaTensor()))
    for check in checks:
        if message is None:
            check()
        else:
            with pytest.raises(NotImplementedError, match=re.escape(message)):
                check()
    with pytest.raises(NotImplementedError, match='Adasum does not support non-global'):
        ops.check_adasum(ops.Adasum, 1, gpu=True, **sizes)
    # CPU tensors: the rank count (3 and 6 are not powers of two).
    with pytest.raises(NotImplementedError, match='Running Adasum with non-power of 2 ranks'):
        ops.check_adasum(ops.Adasum, 0, sizes['job_size'])


def test_tensorflow_gpu_adasum_prechecks(monkeypatch):
    """horovod.tensorflow: a tensor placed on a GPU (device string), in a build with CUDA, gets
    the GPU Adasum's host conditions; a CPU tensor the rank-count refusal."""
    tf = pytest.importorskip('tensorflow')
    from horovod.common.process_sets import global_process_set
    from horovod.tensorflow import mpi_ops

    class Core:  # three ranks on one host
        cuda_built = staticmethod(lambda: True)
        size = staticmethod(lambda: 3)
        local_size = staticmethod(lambda: 3)
        is_homogeneous = staticmethod(lambda: True)

    class GpuTensor:
        device = '/job:localhost/replica:0/task:0/device:GPU:0'

    monkeypatch.setattr(mpi_ops, '_core', Core)
    mpi_ops._adasum_checks(mpi_ops.Adasum, global_process_set, [GpuTensor()])
    with tf.device('/CPU:0'):
        cpu = tf.ones([4])
    with pytest.raises(NotImplementedError, match='Running Adasum with non-power of 2 ranks'):
        mpi_ops._adasum_checks(mpi_ops.Adasum, global_process_set, [cpu])
    class UnplacedTensor:  # a graph tensor before placement: the GPU Adasum where TF has a GPU
        device = ''

    monkeypatch.setattr(mpi_ops.tf.config, 'list_logical_devices', lambda kind: ['gpu0'] if kind == 'GPU' else [])
    mpi_ops._adasum_checks(mpi_ops.Adasum, global_process_set, [UnplacedTensor()])
    monkeypatch.setattr(mpi_ops.tf.config, 'list_logical_devices', lambda kind: [])
    with pytest.raises(NotImplementedError, match='Running Adasum with non-power of 2 ranks'):
        mpi_ops._adasum_checks(mpi_ops.Adasum, global_process_set, [UnplacedTensor()])
    Core.local_size = staticmethod(lambda: 1)  # three hosts
    with pytest.raises(NotImplementedError, match='Running GPU Adasum with non-power of 2 nodes'):
        mpi_ops._adasum_checks(mpi_ops.Adasum, global_process_set, [GpuTensor()])
    Core.cuda_built = staticmethod(lambda: False)  # no CUDA backend: TensorFlow copies to the CPU
    with pytest.raises(NotImplementedError, match='Running Adasum with non-power of 2 ranks'):
        mpi_ops._adasum_checks(mpi_ops.Adasum, global_process_set, [GpuTensor()])
