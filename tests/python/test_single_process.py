"""Checks that need no launcher: imports, argument validation, errors before init, and a
single-rank job (no HOROVOD_* environment: rank 0 of 1)."""

import os
import subprocess
import sys

import pytest

import horovod
from horovod.common import exceptions
from horovod.common.process_sets import ProcessSet

torch = pytest.importorskip('torch')
import horovod.torch as hvd  # noqa: E402

TORCH_EXPORTS = (
    'elastic Compression allgather_object broadcast_object broadcast_optimizer_state '
    'broadcast_parameters allreduce allreduce_async allreduce_ allreduce_async_ grouped_allreduce '
    'grouped_allreduce_async grouped_allreduce_ grouped_allreduce_async_ sparse_allreduce_async '
    'allgather allgather_async grouped_allgather grouped_allgather_async broadcast '
    'broadcast_async broadcast_ broadcast_async_ alltoall alltoall_async reducescatter '
    'reducescatter_async grouped_reducescatter grouped_reducescatter_async join barrier poll '
    'synchronize init shutdown is_initialized start_timeline stop_timeline size local_size '
    'cross_size rank local_rank cross_rank mpi_threads_supported mpi_enabled mpi_built '
    'gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built rocm_built ProcessSet '
    'global_process_set add_process_set remove_process_set Average Sum Adasum Min Max Product '
    'HorovodInternalError DistributedOptimizer SyncBatchNorm PowerSGD Int8Quantizer').split()


def test_version_and_exports():
    assert horovod.__version__ == '0.28.1'
    missing = [name for name in TORCH_EXPORTS if not hasattr(hvd, name)]
    assert missing == []
    assert hvd.HorovodInternalError is exceptions.HorovodInternalError
    assert issubclass(exceptions.HorovodInternalError, RuntimeError)
    assert issubclass(exceptions.HorovodPeerLostError, exceptions.HorovodInternalError)
    assert issubclass(exceptions.HorovodVersionMismatchError, ImportError)
    assert exceptions.HostsUpdatedInterrupt(True).skip_sync is True
    from horovod.torch.mpi_ops import is_homogeneous  # noqa: F401
    from horovod.torch.elastic import ElasticSampler, TorchState, run  # noqa: F401
    from horovod.torch.elastic.state import get_handler_registry, set_handler_registry
    set_handler_registry(get_handler_registry())


def test_errors_before_init():
    assert not hvd.is_initialized()
    for fn in (hvd.rank, hvd.size, hvd.local_rank, hvd.local_size, hvd.cross_rank,
               hvd.cross_size):
        with pytest.raises(ValueError, match=r'Horovod has not been initialized; use hvd.init\(\)'):
            fn()
    with pytest.raises(RuntimeError, match='Horovod has not been initialized'):
        hvd.allreduce(torch.ones(2))
    with pytest.raises(ValueError, match='not been initialized'):
        hvd.add_process_set([0])


def test_optimizer_validation_needs_no_init():
    two = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
    with pytest.raises(ValueError, match='Found duplicates'):
        hvd.DistributedOptimizer(torch.optim.SGD(two.parameters(), lr=0.1),
                                 named_parameters=[n for m in two for n in m.named_parameters()])
    with pytest.raises(ValueError, match='were not named'):
        hvd.DistributedOptimizer(torch.optim.SGD(two.parameters(), lr=0.1),
                                 named_parameters=list(two[0].named_parameters()))
    with pytest.raises(ValueError, match='named_parameters should be a sequence of tuples'):
        hvd.DistributedOptimizer(torch.optim.SGD(two.parameters(), lr=0.1),
                                 named_parameters=list(two.parameters()))


def test_process_set_objects():
    ps = ProcessSet([2, 0])
    assert ps.ranks == [0, 2] and ps.process_set_id is None
    assert ps.size() is None and ps.rank() is None
    assert str(ps) == 'ProcessSet(process_set_id=None, ranks=[0, 2], mpi_comm=None)'
    with pytest.raises(ValueError):
        ProcessSet([0, 'one'])
    assert hvd.global_process_set.process_set_id == 0


def test_init_argument_errors():
    with pytest.raises(ValueError, match='Invalid type of argument comm'):
        hvd.init(comm='world')
    with pytest.raises(ValueError, match='entry 1'):
        hvd.init(process_sets=[ProcessSet([0]), ProcessSet([0])])
    assert not hvd.is_initialized()


def test_single_rank_job():
    hvd.init()
    try:
        assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (0, 1, 0, 1)
        assert torch.equal(hvd.allreduce(torch.ones(3)), torch.ones(3))
        assert torch.equal(hvd.allgather(torch.ones(2, 2)), torch.ones(2, 2))
        assert hvd.join() == 0
        hvd.barrier()
        with pytest.raises(ValueError, match='HOROVOD_DYNAMIC_PROCESS_SETS'):
            hvd.add_process_set([0])
        # size 1: no hooks, the optimizer is the wrapped one
        model = torch.nn.Linear(2, 1)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        assert hvd.broadcast_object({'a': 1}) == {'a': 1}
        assert hvd.allgather_object(5) == [5]
    finally:
        hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(RuntimeError, match='shut down'):
        hvd.allreduce(torch.ones(2))


def test_import_without_torch_initialized_in_subprocess():
    # horovod.common must import without torch and without initializing anything
    code = 'import horovod, horovod.common.basics as b; print(b.HorovodBasics().is_initialized())'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         env=dict(os.environ), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'False'


# Every kind of unnamed call the response cache would take (allreduce sync and async, grouped,
# allgather, grouped allgather, alltoall), many times over a cache of two entries. NAMED swaps in
# fresh explicit names instead: the control, which must fill the cache and print the warning.
_CACHE_SCRIPT = '''
import sys, torch, horovod.torch as hvd
named = sys.argv[1] == "named"
hvd.init()
t = torch.ones(4)
for i in range(8):
    n = (lambda op: "%s.%d" % (op, i)) if named else (lambda op: None)
    assert torch.equal(hvd.allreduce(t, name=n("ar")), t)
    hvd.synchronize(hvd.allreduce_async_(t.clone(), name=n("ar_")))
    hvd.grouped_allreduce([t, t], name=n("gar"))
    hvd.allgather(t, name=n("ag"))
    hvd.grouped_allgather([t, t], name=n("gag"))
    hvd.alltoall(t, name=n("a2a"))
hvd.shutdown()
'''


@pytest.mark.parametrize('naming', ['unnamed', 'named'])
def test_unnamed_calls_stay_out_of_the_response_cache(naming):
    env = dict(os.environ, HOROVOD_CACHE_CAPACITY='2')
    out = subprocess.run([sys.executable, '-c', _CACHE_SCRIPT, naming], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    evicted = 'evicted from cache' in out.stderr
    assert evicted == (naming == 'named'), out.stderr


_ERRORS_BEFORE_INIT = r'''
import importlib, os, sys
import numpy as np
from horovod.common.exceptions import HorovodInternalError
MSG = 'Horovod has not been initialized; use hvd.init().'
hvd = importlib.import_module(sys.argv[1])
for name in ('rank', 'size', 'local_rank', 'local_size', 'cross_rank', 'cross_size'):
    try:
        getattr(hvd, name)()
        sys.exit('{}() did not raise'.format(name))
    except ValueError as e:
        assert str(e) == MSG, (name, str(e))
if sys.argv[1] == 'horovod.tensorflow':
    import tensorflow as tf
    value = tf.ones([2])
else:
    value = np.ones(2, np.float32)
for name, call in (('allreduce', lambda: hvd.allreduce(value)),
                   ('allgather', lambda: hvd.allgather(value)),
                   ('broadcast', lambda: hvd.broadcast(value, 0))):
    try:
        call()
        sys.exit('{}() did not raise'.format(name))
    except HorovodInternalError as e:
        assert MSG in str(e), (name, str(e))
    except Exception as e:  # noqa: B902 - any other class is the defect under test
        sys.exit('{}() raised {}: {}'.format(name, type(e).__name__, e))
print('consistent')
'''


@pytest.mark.parametrize('module, env', [
    ('horovod.tensorflow', {}),
    ('horovod.tensorflow.keras', {}),
    ('horovod.keras', {}),
    ('horovod.keras', {'KERAS_BACKEND': 'torch'}),
])
def test_errors_before_init_are_the_same_in_every_adapter(module, env):
    """rank()/size() and friends raise ValueError, collectives HorovodInternalError, both with
    Horovod's message, whatever the adapter (torch: test_errors_before_init)."""
    pytest.importorskip('tensorflow' if 'KERAS_BACKEND' not in env else 'keras')
    proc = subprocess.run([sys.executable, '-c', _ERRORS_BEFORE_INIT, module], capture_output=True,
                          text=True, timeout=240,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', **env))
    assert proc.returncode == 0 and 'consistent' in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
