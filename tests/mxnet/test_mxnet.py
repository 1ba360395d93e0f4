"""horovod.mxnet under the launcher, in the MXNet 1.9.1 environment (scripts/check_mxnet.sh):

    horovodrun -np 2 /path/to/mxnet-venv/bin/python -m pytest -x tests/mxnet/test_mxnet.py

Every collective (dtypes, ops, scaling, in-place and grouped forms, ragged allgather, alltoall,
reducescatter, process sets), the MXNet engine's ordering of Horovod operations (chains of ops
with no wait_to_read), broadcast_parameters (dicts, ParameterDict, deferred initialisation),
DistributedOptimizer, DistributedTrainer, objects and errors.
"""

import numpy as np
import pytest

mx = pytest.importorskip('mxnet')

import horovod.mxnet as hvd  # noqa: E402

# The spec's public names of horovod.mxnet (Horovod 0.28.1), beside the common basics.
PUBLIC = ['init', 'shutdown', 'is_initialized', 'size', 'local_size', 'cross_size', 'rank',
          'local_rank', 'cross_rank', 'mpi_threads_supported', 'mpi_enabled', 'mpi_built',
          'gloo_enabled', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built', 'cuda_built',
          'rocm_built', 'start_timeline', 'stop_timeline', 'Average', 'Sum', 'Adasum', 'Min',
          'Max', 'Product', 'ProcessSet', 'global_process_set', 'add_process_set',
          'remove_process_set', 'Compression', 'allreduce', 'allreduce_', 'grouped_allreduce',
          'grouped_allreduce_', 'allgather', 'grouped_allgather', 'broadcast', 'broadcast_',
          'alltoall', 'reducescatter', 'grouped_reducescatter', 'broadcast_parameters',
          'broadcast_object', 'allgather_object', 'DistributedOptimizer', 'DistributedTrainer']


@pytest.fixture(scope='module', autouse=True)
def horovod():
    hvd.init(process_sets='dynamic')
    yield
    hvd.shutdown()


def test_public_names():
    missing = [name for name in PUBLIC if not hasattr(hvd, name)]
    assert not missing
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize('dtype', ['int32', 'int64', 'float16', 'float32', 'float64', 'uint8'])
def test_allreduce_sum_dtypes(dtype):
    n, r = hvd.size(), hvd.rank()
    x = mx.nd.ones((4, 3), dtype=dtype) * (r + 1)
    out = hvd.allreduce(x, op=hvd.Sum, name='sum.' + dtype)
    assert out.dtype == np.dtype(dtype) and out.shape == (4, 3)
    np.testing.assert_array_equal(out.asnumpy(), n * (n + 1) // 2)
    np.testing.assert_array_equal(x.asnumpy(), r + 1)


def test_allreduce_ops_and_scaling():
    n, r = hvd.size(), hvd.rank()
    x = mx.nd.ones((5,)) * (r + 1)
    np.testing.assert_allclose(hvd.allreduce(x).asnumpy(), (n + 1) / 2)
    np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Min).asnumpy(), 1)
    np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Max).asnumpy(), n)
    np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Product).asnumpy(), np.prod(np.arange(1, n + 1)))
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    np.testing.assert_allclose(got.asnumpy(), n * (n + 1) / 4)
    with pytest.warns(DeprecationWarning):
        np.testing.assert_allclose(hvd.allreduce(x, average=False).asnumpy(), n * (n + 1) / 2)
    with pytest.raises(ValueError, match='The op parameter supersedes average'):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_adasum():
    # Adasum(a, b) of orthogonal vectors is their sum; of identical vectors, that vector.
    # Horovod's refusals (a rank count that is not a power of two) come before anything is sent.
    n, r = hvd.size(), hvd.rank()
    one_hot = mx.nd.one_hot(mx.nd.array([r]), n).reshape((n,)) * (r + 1)
    same = mx.nd.array([1.5, -2.0, 4.0])
    if n & (n - 1):
        with pytest.raises(NotImplementedError, match='non-power of 2'):
            hvd.allreduce(one_hot, op=hvd.Adasum)
        return
    np.testing.assert_allclose(hvd.allreduce(one_hot, op=hvd.Adasum, name='ada.orth').asnumpy(),
                               np.arange(1, n + 1), rtol=1e-6)
    outs = hvd.grouped_allreduce([same, same.astype('float64')], op=hvd.Adasum, name='ada.same')
    for o in outs:
        np.testing.assert_allclose(o.asnumpy(), [1.5, -2.0, 4.0], rtol=1e-6)


def test_in_place_and_grouped():
    n, r = hvd.size(), hvd.rank()
    s = n * (n + 1) // 2
    x = mx.nd.ones((3,)) * (r + 1)
    assert hvd.allreduce_(x, op=hvd.Sum) is x
    np.testing.assert_array_equal(x.asnumpy(), s)
    xs = [mx.nd.ones((2,)) * (r + 1), mx.nd.ones((2, 2), dtype='int32') * (r + 1)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name='g')
    assert [o.asnumpy().tolist() for o in outs] == [[s] * 2, [[s] * 2] * 2]
    same = hvd.grouped_allreduce_(xs, op=hvd.Sum)
    assert same[0] is xs[0]
    np.testing.assert_array_equal(xs[1].asnumpy(), s)


def _slow(r, size=256):
    """An NDArray equal to r + 1 everywhere, at the end of a chain of engine operations that
    takes a while to run (nothing here waits for it)."""
    a = mx.nd.ones((size, size)) / size
    for _ in range(20):
        a = mx.nd.dot(a, a) * size / size
    return a * 0 + (r + 1)


def test_engine_orders_horovod_ops_without_waits():
    n, r = hvd.size(), hvd.rank()
    s = n * (n + 1) / 2
    results = []
    for i in range(10):
        x = _slow(r)                       # still being computed when allreduce_ is pushed
        hvd.allreduce_(x, op=hvd.Sum, name='chain.inplace.%d' % i)
        y = x * 2                          # must read the reduced values
        z = _slow(r)
        out = hvd.allreduce(z, op=hvd.Sum, name='chain.out.%d' % i)
        z[:] = -1000                       # must not overwrite what the allreduce reads
        w = out + 0
        b = _slow(r)
        hvd.broadcast_(b, root_rank=n - 1, name='chain.bcast.%d' % i)
        b += 1                             # after the broadcast wrote b
        results.append((y, w, b))
    for y, w, b in results:
        np.testing.assert_allclose(y.asnumpy(), 2 * s)
        np.testing.assert_allclose(w.asnumpy(), s)
        np.testing.assert_allclose(b.asnumpy(), n + 1)


def test_allgather_alltoall_reducescatter_broadcast():
    n, r = hvd.size(), hvd.rank()
    g = hvd.allgather(mx.nd.ones((r + 1, 2)) * r)
    want = np.concatenate([np.full((i + 1, 2), i) for i in range(n)])
    np.testing.assert_array_equal(g.asnumpy(), want)
    a, b = hvd.grouped_allgather([mx.nd.ones((1,)) * r, mx.nd.ones((2,), dtype='int32')])
    assert a.asnumpy().tolist() == list(range(n)) and b.shape == (2 * n,)
    x = mx.nd.arange(2 * n) + 100 * r
    np.testing.assert_array_equal(
        hvd.alltoall(x).asnumpy(),
        np.concatenate([np.arange(2 * r, 2 * r + 2) + 100 * i for i in range(n)]))
    out, received = hvd.alltoall(x, splits=[2] * n)
    assert received.asnumpy().tolist() == [2] * n and out.shape == (2 * n,)
    with pytest.raises(ValueError, match='32-bit integer'):
        hvd.alltoall(x, splits=[0.5] * n)
    rs = hvd.reducescatter(mx.nd.arange(2 * n) * (r + 1), op=hvd.Sum)
    np.testing.assert_allclose(rs.asnumpy(), np.arange(2 * r, 2 * r + 2) * n * (n + 1) / 2)
    with pytest.raises(AssertionError):
        hvd.reducescatter(mx.nd.ones((n,)), op=hvd.Max)
    t = mx.nd.ones((3,)) * r
    out = hvd.broadcast(t, root_rank=0)
    np.testing.assert_array_equal(out.asnumpy(), 0)
    np.testing.assert_array_equal(t.asnumpy(), r)


def test_process_set():
    n, r = hvd.size(), hvd.rank()
    members = [1] if n == 2 else [0, n - 1]
    ps = hvd.add_process_set(members)
    try:
        if r in members:
            x = mx.nd.ones((2,)) * (r + 1)
            out = hvd.allreduce(x, op=hvd.Sum, process_set=ps, name='ps.sum')
            np.testing.assert_array_equal(out.asnumpy(), sum(m + 1 for m in members))
    finally:
        hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match='does not exist, or has not been registered'):
        hvd.allreduce(mx.nd.ones((1,)), process_set=ps)


def test_errors():
    with pytest.raises(ValueError, match='NDArray'):
        hvd.allreduce(np.ones(3))
    # Mismatched shapes: the negotiation fails on every rank; the failure is raised as
    # MXNetError by the output's wait_to_read() (Horovod's test pattern), once.
    out = hvd.allreduce(mx.nd.ones((hvd.rank() + 1,)), name='mismatch')
    with pytest.raises(mx.base.MXNetError, match='mismatch'):
        out.wait_to_read()
    hvd.synchronize()
    # In place (the caller's array): raised by synchronize() or the next horovod.mxnet call.
    hvd.allreduce_(mx.nd.ones((hvd.rank() + 1,)), name='mismatch.inplace')
    with pytest.raises(mx.base.MXNetError, match='mismatch.inplace'):
        hvd.synchronize()
    hvd.broadcast_(mx.nd.ones((hvd.rank() + 1,)), root_rank=0, name='mismatch.bcast')
    mx.nd.waitall()
    with pytest.raises(mx.base.MXNetError, match='mismatch.bcast'):
        hvd.allreduce(mx.nd.ones((1,)))
    out = hvd.broadcast(mx.nd.ones((hvd.rank() + 1,)), root_rank=0, name='mismatch.bcast2')
    with pytest.raises(mx.base.MXNetError, match='mismatch.bcast2'):
        out.asnumpy()


def test_broadcast_parameters_dict_and_parameter_dict():
    r = hvd.rank()
    params = {'b': mx.nd.ones((2,)) * r, 'a': mx.nd.ones((3,)) * (r + 5)}
    hvd.broadcast_parameters(params, root_rank=0, prefix='d.')
    assert params['b'].asnumpy().tolist() == [0, 0] and params['a'].asnumpy().tolist() == [5] * 3
    net = mx.gluon.nn.HybridSequential(prefix='net_')
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(4), mx.gluon.nn.Dense(2, in_units=4))
    mx.random.seed(r)
    net.initialize(mx.init.Normal())
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)  # the first Dense is deferred
    net(mx.nd.ones((1, 3)))                                      # initialises it: broadcast
    for name, p in sorted(net.collect_params().items()):
        gathered = hvd.allgather(p.data().expand_dims(0), name='check.' + name).asnumpy()
        assert all(np.array_equal(gathered[0], g) for g in gathered), name
    with pytest.raises(ValueError, match='invalid params of type'):
        hvd.broadcast_parameters([mx.nd.ones(1)])


def test_distributed_optimizer_averages_gradients():
    n, r = hvd.size(), hvd.rank()
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=1.0, rescale_grad=1.0))
    assert opt.learning_rate == 1.0  # attribute delegated
    weight = mx.nd.zeros((3,))
    grad = mx.nd.ones((3,)) * (r + 1)
    opt.update(0, weight, grad, opt.create_state_multi_precision(0, weight))
    np.testing.assert_allclose(weight.asnumpy(), -(n + 1) / 2)
    grouped = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=1.0), num_groups=1)
    ws = [mx.nd.zeros((2,)), mx.nd.zeros((2,))]
    gs = [mx.nd.ones((2,)) * (r + 1), mx.nd.ones((2,)) * 2 * (r + 1)]
    grouped.update([0, 1], ws, gs, [None, None])
    np.testing.assert_allclose(ws[1].asnumpy(), -(n + 1))


def test_distributed_trainer_keeps_ranks_identical():
    n, r = hvd.size(), hvd.rank()
    net = mx.gluon.nn.Dense(1, in_units=2, use_bias=False, prefix='tr_')
    net.initialize(mx.init.Zero())
    with pytest.warns(UserWarning, match='unwrapped'):
        hvd.DistributedTrainer(net.collect_params(), hvd.DistributedOptimizer(mx.optimizer.SGD()))
    trainer = hvd.DistributedTrainer(net.collect_params(), 'sgd', {'learning_rate': 1.0},
                                     prefix='tr.')
    x = mx.nd.ones((1, 2)) * (r + 1)
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    trainer.step(1)
    # d loss / d w = x; averaged over ranks: (n + 1) / 2 per entry.
    np.testing.assert_allclose(net.weight.data().asnumpy(), [[-(n + 1) / 2] * 2], rtol=1e-6)


def test_objects():
    r, n = hvd.rank(), hvd.size()
    assert hvd.broadcast_object({'r': r}, root_rank=n - 1) == {'r': n - 1}
    assert hvd.allgather_object(r * 10) == [i * 10 for i in range(n)]


def test_dtype_mismatch_and_trainer_compression():
    r, n = hvd.rank(), hvd.size()
    out = hvd.allreduce(mx.nd.ones((2,), dtype='float32' if r == 0 else 'int32'),
                        name='dtype.mismatch')
    with pytest.raises(mx.base.MXNetError):
        out.wait_to_read()
    net = mx.gluon.nn.Dense(1, in_units=2, use_bias=False, prefix='fp16_')
    net.initialize(mx.init.Zero())
    trainer = hvd.DistributedTrainer(net.collect_params(), 'sgd', {'learning_rate': 1.0},
                                     compression=hvd.Compression.fp16, prefix='fp16.')
    with mx.autograd.record():
        loss = net(mx.nd.ones((1, 2)) * (r + 1)).sum()
    loss.backward()
    trainer.step(1)
    np.testing.assert_allclose(net.weight.data().asnumpy(), [[-(n + 1) / 2] * 2], rtol=1e-3)
