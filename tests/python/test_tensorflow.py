"""horovod.tensorflow under the launcher (every rank runs every test, in order).

    horovodrun -np 2 python -m pytest -x tests/python/test_tensorflow.py

Covers spec python-api §2: every exported name, the collectives (values, dtypes, gradients,
eager vs ``tf.function``, names, process sets, ``tf.IndexedSlices``, compression), the
gradient tape (grouping, local sources, sparse gradients), the legacy optimizer in a TF1 graph
and eagerly, SyncBatchNormalization, the broadcast hook, object collectives, elastic states and
the error cases (the job keeps working after each error).
"""

import os

import numpy as np
import pytest

tf = pytest.importorskip('tensorflow')

import horovod.tensorflow as hvd  # noqa: E402
from horovod.common.exceptions import HorovodInternalError  # noqa: E402
from horovod.tensorflow import mpi_ops as hvd_mpi_ops  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)

REDUCE_DTYPES = [tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
                 tf.float64]
MOVE_DTYPES = REDUCE_DTYPES + [tf.uint16, tf.int16, tf.bool]
SPEC_EXPORTS = (
    'init shutdown is_initialized start_timeline stop_timeline size local_size cross_size rank '
    'local_rank cross_rank mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built '
    'nccl_built ddl_built ccl_built cuda_built rocm_built ProcessSet global_process_set '
    'add_process_set remove_process_set Average Sum Adasum Min Max Product allreduce '
    'reducescatter grouped_allreduce grouped_reducescatter allgather grouped_allgather broadcast '
    'broadcast_ alltoall join size_op local_size_op rank_op local_rank_op '
    'process_set_included_op broadcast_variables broadcast_object broadcast_object_fn '
    'allgather_object broadcast_global_variables BroadcastGlobalVariablesHook '
    'DistributedOptimizer DistributedGradientTape PartialDistributedGradientTape '
    'SyncBatchNormalization LocalGradientAggregationHelper Compression elastic '
    'is_homogeneous').split()


@pytest.fixture(scope='module', autouse=True)
def horovod():
    hvd.init(process_sets='dynamic')
    yield
    hvd.shutdown()


def n():
    return hvd.size()


def r():
    return hvd.rank()


def full(dtype, value, shape=(2, 3)):
    if dtype == tf.bool:
        return tf.fill(shape, bool(value % 2))
    return tf.cast(tf.fill(shape, value), dtype)


def count_grouped_allreduces(monkeypatch):
    """Counts the calls that reach the raw grouped allreduce (one core crossing each: eagerly
    one call, in a graph one op)."""
    calls = []
    original = hvd_mpi_ops._grouped_allreduce

    def counting(tensors, *args, **kwargs):
        calls.append(len(tensors))
        return original(tensors, *args, **kwargs)

    monkeypatch.setattr(hvd_mpi_ops, '_grouped_allreduce', counting)
    return calls


# ---- basics --------------------------------------------------------------------------------------

def test_exports_and_basics():
    missing = [name for name in SPEC_EXPORTS if not hasattr(hvd, name)]
    assert missing == []
    assert r() == int(os.environ.get('HOROVOD_RANK', '0'))
    assert n() == int(os.environ.get('HOROVOD_SIZE', '1'))
    assert hvd.is_homogeneous() in (True, False) and hvd.is_homogeneous()
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    assert not hasattr(hvd, 'barrier') and not hasattr(hvd, 'synchronize')


def test_topology_ops_eager_and_in_graph():
    @tf.function
    def ops():
        return (hvd.size_op(), hvd.rank_op(), hvd.local_size_op(), hvd.local_rank_op(),
                hvd.process_set_included_op(), hvd.process_set_included_op(99))

    for values in (ops(), (hvd.size_op(), hvd.rank_op(), hvd.local_size_op(),
                           hvd.local_rank_op(), hvd.process_set_included_op(),
                           hvd.process_set_included_op(99))):
        assert [int(v) for v in values] == [n(), r(), hvd.local_size(), hvd.local_rank(), 1, -1]
        assert all(v.dtype == tf.int32 for v in values)


# ---- allreduce -----------------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', REDUCE_DTYPES, ids=lambda d: d.name)
def test_allreduce_sum_dtypes(dtype):
    out = hvd.allreduce(full(dtype, r() + 1), op=hvd.Sum, name='sum.' + dtype.name)
    assert out.dtype == dtype and out.shape == (2, 3)
    assert np.array_equal(tf.cast(out, tf.float64).numpy(), np.full((2, 3), n() * (n() + 1) / 2))


def test_allreduce_average_min_max_product_and_scaling():
    x = tf.constant([1.0, 2.0, 3.0]) * (r() + 1)
    assert np.allclose(hvd.allreduce(x).numpy(), [(n() + 1) / 2 * v for v in (1, 2, 3)])
    assert np.allclose(hvd.allreduce(x, op=hvd.Min).numpy(), [1, 2, 3])
    assert np.allclose(hvd.allreduce(x, op=hvd.Max).numpy(), [n() * v for v in (1, 2, 3)])
    prod = np.prod([k + 1 for k in range(n())])
    assert np.allclose(hvd.allreduce(x, op=hvd.Product).numpy(),
                       [prod * v ** n() for v in (1, 2, 3)])
    ones = tf.ones([4], tf.int32)
    scaled = hvd.allreduce(ones, op=hvd.Sum, prescale_factor=2.0, postscale_factor=1.5)
    assert scaled.numpy().tolist() == [3 * n()] * 4


def test_device_dense_and_sparse_place_the_ops():
    x = tf.constant([1.0, 2.0])

    @tf.function
    def placed(x):
        return hvd.allreduce(x, device_dense='/cpu:0', op=hvd.Sum, name='placed')

    graph = placed.get_concrete_function(x).graph
    devices = [op.device for op in graph.get_operations()
               if op.type in ('HorovodAllreduce', 'EagerPyFunc')]
    assert devices and all(d.endswith('CPU:0') for d in devices), devices
    assert placed(x).numpy().tolist() == [hvd.size() * 1.0, hvd.size() * 2.0]
    # A device this machine lacks falls back to the CPU (TensorFlow's soft placement).
    gpu = hvd.allreduce(x, device_dense='/device:GPU:0', op=hvd.Sum, name='placed_gpu')
    assert gpu.numpy().tolist() == [hvd.size() * 1.0, hvd.size() * 2.0]
    sparse = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([hvd.rank()], tf.int64), [4, 2])
    gathered = hvd.allreduce(sparse, device_sparse='/cpu:0', op=hvd.Sum, name='placed_sparse')
    assert gathered.indices.numpy().tolist() == list(range(hvd.size()))


def test_allreduce_average_argument():
    x = tf.ones([3])
    with pytest.warns(DeprecationWarning):
        out = hvd.allreduce(x, average=False)
    assert np.allclose(out.numpy(), n())
    with pytest.raises(ValueError, match='The op parameter supersedes average'):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_unsupported_dtypes_raise_value_and_tf_errors():
    with pytest.raises(ValueError, match='not supported'):
        hvd.allreduce(tf.constant([True, False]))
    with pytest.raises(tf.errors.InvalidArgumentError):
        hvd.allgather(tf.constant(['a']))
    with pytest.raises(ValueError):
        hvd.reducescatter(tf.ones([n()], tf.uint8))


def test_collectives_equal_in_tf_function_and_eagerly():
    x = tf.reshape(tf.range(4 * n(), dtype=tf.float32), [2 * n(), 2]) + r()

    def run(v):
        return [hvd.allreduce(v, op=hvd.Sum), hvd.grouped_allreduce([v, 2 * v])[1],
                hvd.allgather(v), hvd.broadcast(v, 0), hvd.alltoall(v),
                hvd.reducescatter(v, op=hvd.Sum), hvd.grouped_allgather([v])[0],
                hvd.grouped_reducescatter([v])[0]]

    eager = run(x)
    graph = tf.function(run)(x)
    for e, g in zip(eager, graph):
        assert np.array_equal(e.numpy(), g.numpy())
    assert graph[4].shape == (2 * n(), 2)  # equal split: as many rows back


def test_allreduce_gradients_eager_and_graph():
    x = tf.constant([1.0, 2.0, 3.0])

    def grads(v):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(v)
            s = hvd.allreduce(v, op=hvd.Sum)
            a = hvd.allreduce(v, op=hvd.Average)
            g1, g2 = hvd.grouped_allreduce([v, v * 2.0], op=hvd.Sum)
            both = g1 + g2
        return (tape.gradient(s, v), tape.gradient(a, v), tape.gradient(both, v))

    for result in (grads(x), tf.function(grads)(x)):
        assert np.allclose(result[0].numpy(), n())
        assert np.allclose(result[1].numpy(), 1.0)
        assert np.allclose(result[2].numpy(), 3 * n())


def test_gather_broadcast_alltoall_reducescatter_gradients():
    x = tf.ones([2, 2]) * (r() + 1)

    def grads(v):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(v)
            gathered = hvd.allgather(v)
            weights = tf.repeat(tf.range(n(), dtype=tf.float32), 2)[:, None]
            g_loss = tf.reduce_sum(gathered * weights)
            b_loss = tf.reduce_sum(hvd.broadcast(v, 0))
            a_loss = tf.reduce_sum(hvd.alltoall(tf.tile(v, [n(), 1])))
            rs_loss = tf.reduce_sum(hvd.reducescatter(tf.tile(v, [n(), 1]), op=hvd.Sum))
        return [tape.gradient(loss, v) for loss in (g_loss, b_loss, a_loss, rs_loss)]

    for g, bg, ag, rg in (grads(x), tf.function(grads)(x)):
        assert np.allclose(g.numpy(), r())           # my block's weight, averaged over ranks
        assert np.allclose(bg.numpy(), 1.0 if r() == 0 else 0.0)
        assert np.allclose(ag.numpy(), n())           # n tiles, each sent once
        assert np.allclose(rg.numpy(), n() * n())     # Sum: n copies * set size


def test_jit_compile_fails_at_trace_time_with_advice():
    compiled = tf.function(lambda v: hvd.allreduce(v), jit_compile=True)
    # AutoGraph re-raises errors from converted user code as its StagingError (keeping the
    # message) unless the error class has OpError's constructor signature.
    with pytest.raises(Exception, match=r'cannot be compiled by XLA \(tf.function\(jit_compile'):
        compiled(tf.ones([2]))
    assert np.allclose(hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy(), n())


def test_graph_names_and_ignore_name_scope():
    def name_in_new_graph(ignore_name_scope):
        with tf.Graph().as_default():
            t = tf.constant([1.0], name='in/put')
            with tf.name_scope('outer'):
                return [hvd_mpi_ops._core_name('allreduce.', 'HorovodAllreduce_', t, None,
                                               ignore_name_scope)[0] for _ in range(2)]

    assert name_in_new_graph(False) == ['allreduce.outer/HorovodAllreduce_in_put_0',
                                        'allreduce.outer/HorovodAllreduce_in_put_0_1']
    assert name_in_new_graph(True) == ['allreduce.HorovodAllreduce_in_put_0',
                                       'allreduce.HorovodAllreduce_in_put_0_1']

    @tf.function
    def scoped(v):
        # Rank-dependent scopes would mismatch; ignore_name_scope makes the names agree.
        with tf.name_scope('rank%d' % r()):
            return hvd.allreduce(v, op=hvd.Sum, name='scoped', ignore_name_scope=True)

    assert np.allclose(scoped(tf.ones([2])).numpy(), n())


# ---- allgather / broadcast / alltoall / reducescatter / join ------------------------------------

@pytest.mark.parametrize('dtype', MOVE_DTYPES, ids=lambda d: d.name)
def test_allgather_and_broadcast_dtypes(dtype):
    rows = r() + 1
    gathered = hvd.allgather(full(dtype, r() + 1, (rows, 2)), name='ag.' + dtype.name)
    assert gathered.dtype == dtype and gathered.shape == (n() * (n() + 1) // 2, 2)
    expect = np.concatenate([full(dtype, k + 1, (k + 1, 2)).numpy() for k in range(n())])
    assert np.array_equal(gathered.numpy(), expect)
    for root in range(n()):
        out = hvd.broadcast(full(dtype, r() + 1), root, name='bc.%s.%d' % (dtype.name, root))
        assert np.array_equal(out.numpy(), full(dtype, root + 1).numpy())


def test_alltoall_splits_and_errors():
    x = tf.fill([sum(k + 1 for k in range(n())), 2], r())
    out, received = hvd.alltoall(x, splits=[k + 1 for k in range(n())])
    assert received.dtype == tf.int32 and received.numpy().tolist() == [r() + 1] * n()
    assert out.shape == ((r() + 1) * n(), 2)
    assert sorted(set(out.numpy()[:, 0].tolist())) == list(range(n()))
    with pytest.raises(ValueError):
        hvd.alltoall(tf.ones([n() + 1, 2]) if n() > 1 else tf.ones([1, 2]),
                     splits=[5] * n())


def test_alltoall_returns_the_tensor_alone_without_splits():
    # Horovod's rule: (output, received_splits) only when splits is given, so the result of an
    # equal-split alltoall feeds straight into other ops, eagerly, in tf.function and in a graph.
    x = tf.reshape(tf.range(2 * n(), dtype=tf.float32), [2 * n(), 1]) + 10 * r()
    expect = np.concatenate([[2 * r(), 2 * r() + 1] for _ in range(n())]) + \
        10 * np.repeat(np.arange(n()), 2)

    def run(v):
        collected = hvd.alltoall(v, name='a2a.alone')
        return tf.cast(collected, tf.int32), collected

    for as_int, out in (run(x), tf.function(run)(x)):
        assert isinstance(out, tf.Tensor) and out.shape == (2 * n(), 1)
        assert as_int.numpy()[:, 0].tolist() == expect.tolist()
    with tf.Graph().as_default():
        graph_out = hvd.alltoall(tf.constant(x.numpy()))
        assert isinstance(graph_out, tf.Tensor)
        with tf.compat.v1.Session() as session:
            assert session.run(graph_out)[:, 0].tolist() == expect.tolist()
    # splits given (a list, or a tensor even inside tf.function): the pair.
    for splits in ([2] * n(), tf.constant([2] * n())):
        pair = hvd.alltoall(x, splits=splits)
        assert isinstance(pair, tuple) and len(pair) == 2
        assert pair[1].numpy().tolist() == [2] * n()
    pair = tf.function(lambda v: hvd.alltoall(v, splits=tf.constant([2] * n())))(x)
    assert isinstance(pair, tuple) and pair[0].shape == (2 * n(), 1)


def test_alltoall_into_a_model_and_its_gradient():
    # The pattern that broke: an alltoall result fed into a layer, trained through the tape.
    layer = tf.keras.layers.Dense(1, kernel_initializer='ones', use_bias=False)
    x = tf.ones([2 * n(), 3]) * (r() + 1)
    for splits in (None, [2] * n()):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = hvd.alltoall(x, splits=splits)
            if splits is not None:
                out, received = out
                assert received.numpy().tolist() == [2] * n()
            loss = tf.reduce_sum(layer(out))
        grad = tape.gradient(loss, x)
        assert np.allclose(grad.numpy(), 1.0)       # every row sent once, weight 1


def test_horovod_private_names():
    # Names Horovod's horovod.tensorflow exposes that its tests and user helpers call.
    assert hvd._executing_eagerly() is True
    assert tf.function(lambda: tf.constant(hvd._executing_eagerly()))().numpy() == False  # noqa
    assert hvd._IS_TF2 is True and hvd._LegacyOptimizer is tf.compat.v1.train.Optimizer
    assert hvd_mpi_ops._normalize_name('a/b:0') == 'a_b_0'
    x = tf.fill([n(), 2], float(r() + 1))
    total = n() * (n() + 1) / 2
    assert np.allclose(hvd._allreduce(x).numpy(), total)                   # default: Sum
    assert np.allclose(hvd._allreduce(x, op=hvd.Average).numpy(), total / n())
    assert np.allclose(hvd._grouped_allreduce([x, 2 * x])[1].numpy(), 2 * total)
    assert np.allclose(hvd._reducescatter(x).numpy(), total)               # default: Sum
    assert hvd._reducescatter(x).shape == (1, 2)
    assert np.allclose(hvd._grouped_reducescatter([x])[0].numpy(), total)
    v = tf.Variable([1.0])
    assert hvd.refs_to_vars(hvd.vars_to_refs([v, [v]])) == [v, [v]]
    fn = hvd._make_allreduce_grads_fn('p', '', '', hvd.Compression.none, False, hvd.Average,
                                      1.0, None)
    assert np.allclose(fn([x], [v])[0].numpy(), total / n())
    cached = hvd._make_cached_allreduce_grads_fn('p', '', '', hvd.Compression.none, False,
                                                 hvd.Average, 1.0, [[v]])
    assert cached is hvd._make_cached_allreduce_grads_fn('p', '', '', hvd.Compression.none,
                                                         False, hvd.Average, 1.0, [[v]])
    assert np.allclose(cached([x], [v])[0].numpy(), total / n())
    calls = []
    square = hvd._cache(lambda k: calls.append(k) or k * k)
    assert square(3) == 9 and square(3) == 9 and calls == [3]
    assert hvd._make_subgraph(lambda a: a + 1)(tf.constant(1)).numpy() == 2
    # As in Horovod, the tape wrapper builds a subclass of the tape's own class from this one.
    assert issubclass(hvd._DistributedGradientTape, tf.GradientTape)
    with tf.Graph().as_default():
        legacy = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        assert isinstance(hvd.DistributedOptimizer(legacy), hvd._DistributedOptimizer)
        direct = hvd._DistributedOptimizer(legacy)                  # Horovod's defaults
        assert direct.get_name() == 'DistributedGradientDescentOptimizer'
        if n() & (n() - 1) == 0:
            assert isinstance(hvd.DistributedOptimizer(legacy, op=hvd.Adasum),
                              hvd._DistributedAdasumOptimizer)


def test_reducescatter_ops_and_errors():
    x = tf.reshape(tf.range(3 * n(), dtype=tf.float32), [3 * n(), 1])
    out = hvd.reducescatter(x, op=hvd.Sum)
    assert np.allclose(out.numpy()[:, 0], n() * np.arange(3 * r(), 3 * r() + 3))
    assert np.allclose(hvd.reducescatter(x).numpy()[:, 0], np.arange(3 * r(), 3 * r() + 3))
    with pytest.raises(NotImplementedError):
        hvd.reducescatter(x, op=hvd.Max)
    with pytest.raises(ValueError, match='scalar'):
        hvd.reducescatter(tf.constant(1.0))
    with pytest.raises(ValueError, match='same dtype'):
        hvd.grouped_reducescatter([tf.ones([n()]), tf.ones([n()], tf.int32)])


def test_join_returns_last_rank_everywhere():
    # Which rank joins last is a race; every rank must report the same one.
    for last in (int(hvd.join()), int(tf.function(hvd.join)())):
        assert 0 <= last < n()
        assert hvd.allgather(tf.constant([last])).numpy().tolist() == [last] * n()


# ---- sparse, compression -------------------------------------------------------------------------

def test_indexed_slices_allreduce():
    slices = tf.IndexedSlices(tf.ones([1, 2]) * (r() + 1), tf.constant([r()]),
                              dense_shape=tf.constant([n(), 2]))
    avg = hvd.allreduce(slices)
    assert isinstance(avg, tf.IndexedSlices)
    assert avg.indices.numpy().tolist() == list(range(n()))
    assert np.allclose(avg.values.numpy()[:, 0], [(k + 1) / n() for k in range(n())])
    summed = hvd.grouped_allreduce([slices, tf.ones([2])], op=hvd.Sum)
    assert np.allclose(tf.convert_to_tensor(summed[0]).numpy()[:, 0], [k + 1 for k in range(n())])
    assert np.allclose(summed[1].numpy(), n())
    with pytest.raises(NotImplementedError, match='sparse_as_dense'):
        hvd.allreduce(slices, op=hvd.Adasum)
    with pytest.raises(NotImplementedError):
        hvd.allreduce(slices, op=hvd.Max)
    with pytest.raises(NotImplementedError):
        hvd.allreduce(slices, prescale_factor=2.0)


@pytest.mark.parametrize('kind', ['fp16', 'bf16'])
def test_compression(kind):
    compression = getattr(hvd.Compression, kind)
    wire = tf.float16 if kind == 'fp16' else tf.bfloat16
    compressed, ctx = compression.compress(tf.ones([2], tf.float64))
    assert compressed.dtype == wire
    assert compression.decompress(compressed, ctx).dtype == tf.float64
    ints, ctx = compression.compress(tf.ones([2], tf.int32))
    assert ints.dtype == tf.int32
    out = hvd.allreduce(tf.ones([3]) * (r() + 1), op=hvd.Sum, compression=compression)
    assert out.dtype == tf.float32 and np.allclose(out.numpy(), n() * (n() + 1) / 2)


# ---- variables and objects -----------------------------------------------------------------------

def test_broadcast_variables_and_broadcast_():
    v = tf.Variable(tf.fill([3], float(r())))
    w = tf.Variable(tf.fill([2], r()))
    assert hvd.broadcast_variables([v, w], root_rank=n() - 1) is None
    assert v.numpy().tolist() == [n() - 1.0] * 3 and w.numpy().tolist() == [n() - 1] * 2
    v.assign(tf.fill([3], float(r())))
    values = hvd.broadcast_([v], root_rank=0)
    assert v.numpy().tolist() == [0.0] * 3 and values[0].numpy().tolist() == [0.0] * 3
    with pytest.raises(RuntimeError, match='broadcast_variables'):
        hvd.broadcast_global_variables(0)


def test_object_collectives():
    obj = {'rank': r(), 'payload': list(range(r() + 1))}
    assert hvd.broadcast_object(obj, root_rank=0) == {'rank': 0, 'payload': [0]}
    fn = hvd.broadcast_object_fn(root_rank=n() - 1)
    assert fn(obj)['rank'] == n() - 1
    gathered = hvd.allgather_object(obj)
    assert [o['rank'] for o in gathered] == list(range(n()))


def test_util_refs_and_cache():
    from horovod.tensorflow import util
    tf_var = tf.Variable(1.0)
    keras_var = tf.keras.Variable(2.0)  # Keras 3: no .ref(), not hashable
    refs = util.vars_to_refs([tf_var, [keras_var]])
    assert isinstance(refs, tuple) and len({refs[0], refs[1][0]}) == 2
    assert util.vars_to_refs(keras_var) == util.vars_to_refs(keras_var)
    back = util.refs_to_vars(refs)
    assert back[0] is tf_var and back[1][0] is keras_var
    calls = []
    cached = util._cache(lambda a, b: calls.append((a, b)) or len(calls))
    assert cached(1, 2) == 1 and cached(1, 2) == 1 and cached(2, 1) == 2
    assert util._executing_eagerly() and not tf.function(util._executing_eagerly)()


# ---- process sets --------------------------------------------------------------------------------

def test_process_sets_collectives_tape_and_errors():
    evens = hvd.add_process_set([k for k in range(n()) if k % 2 == 0])
    odds = hvd.add_process_set([k for k in range(n()) if k % 2 == 1]) if n() > 1 else None
    try:
        mine = evens if r() % 2 == 0 else odds
        other = odds if r() % 2 == 0 else evens
        out = hvd.allreduce(tf.ones([2]), op=hvd.Sum, process_set=mine)
        assert np.allclose(out.numpy(), len(mine.ranks))
        assert hvd.allgather(tf.constant([r()]), process_set=mine).numpy().tolist() == mine.ranks
        assert hvd.broadcast_object('x%d' % r(), root_rank=mine.ranks[0],
                                    process_set=mine) == 'x%d' % mine.ranks[0]
        v = tf.Variable([float(r())])
        with tf.GradientTape() as tape:
            loss = v * (r() + 1.0)
        # Named (generic names): a one-rank set skips its reduction, and an unnamed eager op
        # would advance the per-process name counter on the other ranks only.
        grad = hvd.DistributedGradientTape(tape, process_set=mine).gradient(
            loss, [v], use_generic_names=True)[0]
        want = np.mean([k + 1.0 for k in mine.ranks])
        assert np.allclose(grad.numpy(), want)
        if other is not None:
            with pytest.raises(ValueError):
                hvd.allreduce(tf.ones([2]), process_set=other, name='ps.nonmember')
            # A tape over a set this rank is not in returns the local gradient unreduced.
            with tf.GradientTape() as tape:
                loss = v * (r() + 1.0)
            local = hvd.DistributedGradientTape(tape, process_set=other).gradient(loss, [v])[0]
            assert np.allclose(local.numpy(), r() + 1.0)
            with pytest.raises(NotImplementedError, match='process sets'):
                hvd.allreduce(tf.ones([2]), op=hvd.Adasum, process_set=mine)
    finally:
        assert hvd.remove_process_set(evens)
        if odds is not None:
            assert hvd.remove_process_set(odds)


# ---- errors --------------------------------------------------------------------------------------

def test_mismatched_shapes_raise_on_every_rank_then_recover():
    if n() == 1:
        pytest.skip('needs 2 ranks')
    with pytest.raises(HorovodInternalError, match='Mismatched') as info:
        hvd.allreduce(tf.ones([2 + r()]), name='err.shape')
    assert isinstance(info.value, tf.errors.OpError)
    assert 'rank' in str(info.value).lower()
    with pytest.raises(HorovodInternalError, match='Mismatched'):
        hvd.allreduce(tf.ones([3], tf.int32 if r() == 0 else tf.float32), name='err.dtype')

    @tf.function
    def graph_mismatch(v):
        return hvd.allgather(v, name='err.graph')

    with pytest.raises(tf.errors.OpError, match='Mismatched'):
        graph_mismatch(tf.ones([1, 1 + r()]))
    out = hvd.allreduce(tf.ones([3]), op=hvd.Sum, name='err.after')
    assert np.allclose(out.numpy(), n())


def test_adasum_errors():
    if n() & (n() - 1):
        with pytest.raises(NotImplementedError, match='non-power of 2'):
            hvd.allreduce(tf.ones([2]), op=hvd.Adasum)
    with pytest.raises(ValueError, match='Keras'):
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), op=hvd.Adasum)
    opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    with pytest.raises(NotImplementedError):
        hvd.DistributedOptimizer(opt, op=hvd.Adasum, process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match='average_aggregated_gradients'):
        hvd.DistributedOptimizer(opt, op=hvd.Adasum, average_aggregated_gradients=True)


# ---- DistributedGradientTape ---------------------------------------------------------------------

def _model_vars():
    return [tf.Variable([[1.0, 2.0], [3.0, 4.0]], name='w'), tf.Variable([0.5, -0.5], name='b'),
            tf.Variable([7.0], name='unused')]


def _loss(vs, scale):
    w, b, _ = vs
    x = tf.constant([[1.0, 2.0]]) * scale
    return tf.reduce_sum(tf.matmul(x, w) + b) ** 2 / 10.0


def _local_grads(vs, scale):
    with tf.GradientTape() as tape:
        loss = _loss(vs, scale)
    return tape.gradient(loss, vs)


def _averaged_reference(vs):
    per_rank = [_local_grads(vs, k + 1.0) for k in range(n())]
    return [np.mean([g[i].numpy() for g in per_rank], axis=0) for i in range(2)]


def test_tape_averages_gradients_eager_and_tf_function(monkeypatch):
    vs = _model_vars()
    want = _averaged_reference(vs)
    calls = count_grouped_allreduces(monkeypatch)

    def step(scale):
        with tf.GradientTape() as tape:
            loss = _loss(vs, scale)
        tape = hvd.DistributedGradientTape(tape)
        assert type(tape).__name__ == 'GradientTape' and isinstance(tape, tf.GradientTape)
        return tape.gradient(loss, vs)

    eager = step(tf.constant(r() + 1.0))
    assert calls == [2]  # one crossing for the whole step; the None gradient is not sent
    graph = tf.function(step)(tf.constant(r() + 1.0))
    assert calls == [2, 2]
    for grads in (eager, graph):
        assert grads[2] is None
        for g, w in zip(grads[:2], want):
            assert np.allclose(g.numpy(), w)
    for e, g in zip(eager[:2], graph[:2]):
        assert np.array_equal(e.numpy(), g.numpy())


def test_tape_wrapped_before_recording_and_nested_sources():
    vs = _model_vars()
    tape = hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum)
    with tape:
        loss = _loss(vs, r() + 1.0)
    grads = tape.gradient(loss, {'w': vs[0], 'rest': [vs[1], vs[2]]})
    want = [w * n() for w in _averaged_reference(vs)]
    assert np.allclose(grads['w'].numpy(), want[0])
    assert np.allclose(grads['rest'][0].numpy(), want[1]) and grads['rest'][1] is None


def test_tape_groups(monkeypatch):
    vs = [tf.Variable(float(k)) for k in range(5)]
    calls = count_grouped_allreduces(monkeypatch)

    def grads(**kwargs):
        with tf.GradientTape() as tape:
            loss = sum((k + 1.0) * v for k, v in enumerate(vs)) * (r() + 1)
        return hvd.DistributedGradientTape(tape, **kwargs).gradient(loss, vs)

    with pytest.warns(DeprecationWarning):
        out = grads(num_groups=2)
    assert calls == [3, 2]
    del calls[:]
    out2 = grads(groups=2)
    assert calls == [3, 2]
    del calls[:]
    out3 = grads(groups=[[vs[4], vs[0]]])
    assert calls == [2, 1, 1, 1]
    want = [(k + 1.0) * (n() + 1) / 2 for k in range(5)]
    for result in (out, out2, out3):
        assert np.allclose([g.numpy() for g in result], want)
    with pytest.raises(ValueError, match='groups'):
        hvd.DistributedGradientTape(tf.GradientTape(), groups=-1)
    with pytest.raises(ValueError, match='once'):
        hvd.DistributedGradientTape(tf.GradientTape(), groups=[[vs[0]], [vs[0]]])


def test_tape_predivide_ops_and_generic_names():
    vs = _model_vars()
    want = _averaged_reference(vs)
    with tf.GradientTape() as tape:
        loss = _loss(vs, r() + 1.0)
    grads = hvd.DistributedGradientTape(tape, gradient_predivide_factor=2.0).gradient(loss, vs)
    assert all(np.allclose(g.numpy(), w) for g, w in zip(grads[:2], want))
    with pytest.raises(ValueError, match='gradient_predivide_factor'):
        hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum, gradient_predivide_factor=2.0)

    @tf.function
    def scoped(scale):
        with tf.name_scope('rank_scope_%d' % r()):
            with tf.GradientTape() as tape:
                loss = _loss(vs, scale)
            return hvd.DistributedGradientTape(tape).gradient(loss, vs, use_generic_names=True)

    grads = scoped(tf.constant(r() + 1.0))
    assert all(np.allclose(g.numpy(), w) for g, w in zip(grads[:2], want))


def test_tape_local_sources_and_partial_tape():
    dense = tf.keras.layers.Dense(1, kernel_initializer='ones', name='local_dense')
    shared = tf.Variable([2.0])
    x = tf.constant([[float(r() + 1)]])

    def record():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(dense(x)) * shared
        return tape, loss

    record()  # build the layer
    tape, loss = record()
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=dense)
    kernel_grad, shared_grad = tape.gradient(loss, [dense.kernel, shared])
    # local: (r+1)*2 / n (scale_local_gradients); shared: mean over ranks of (r+1)
    assert np.allclose(kernel_grad.numpy(), (r() + 1) * 2.0 / n())
    assert np.allclose(shared_grad.numpy(), (n() + 1) / 2.0)

    tape, loss = record()
    tape = hvd.DistributedGradientTape(tape, scale_local_gradients=False)
    tape.register_local_source(shared)
    local_pairs, global_pairs = tape.get_local_and_global_gradients(loss, [dense.kernel, shared])
    assert [s is shared for s, _ in local_pairs] == [True]
    assert np.allclose(local_pairs[0][1].numpy(), r() + 1.0)
    assert np.allclose(global_pairs[0][1].numpy(), n() + 1.0)  # mean of 2*(k+1)
    with pytest.raises(ValueError, match='Layer'):
        hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=[shared])


def test_tape_sparse_gradients():
    table = tf.Variable(tf.ones([n(), 2]))

    def grads(**kwargs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, [r()])) * (r() + 1)
        return hvd.DistributedGradientTape(tape, **kwargs).gradient(loss, [table])[0]

    sparse = grads()
    dense = grads(sparse_as_dense=True)
    assert isinstance(sparse, tf.IndexedSlices) and not isinstance(dense, tf.IndexedSlices)
    want = np.array([[(k + 1.0) / n()] * 2 for k in range(n())])
    assert np.allclose(tf.convert_to_tensor(sparse).numpy(), want)
    assert np.allclose(dense.numpy(), want)


# ---- DistributedOptimizer ------------------------------------------------------------------------

def _tf1_train(optimizer_fn, steps, hooks=(), initial=None, **kwargs):
    """Trains w (init: per-rank, or ``initial``) on loss = sum((x_r * w)^2)/2 in a TF1 graph;
    returns (w, opt, extra) evaluated after ``steps`` runs of the train op."""
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable(
            'w', initializer=tf.constant(initial if initial is not None else [float(r())] * 2))
        x = tf.constant([1.0, 2.0]) * (r() + 1)
        loss = tf.reduce_sum(tf.square(x * w)) / 2.0
        global_step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(optimizer_fn(), **kwargs)
        train = opt.minimize(loss, global_step=global_step)
        with tf.compat.v1.train.MonitoredSession(hooks=list(hooks)) as sess:
            for _ in range(steps):
                sess.run(train)
            return sess.run(w), opt, sess.run(global_step)


def test_legacy_optimizer_tf1_graph_with_broadcast_hook():
    hook = hvd.BroadcastGlobalVariablesHook(0)
    w, opt, step = _tf1_train(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1), 1,
                              hooks=[hook])
    assert isinstance(opt, tf.compat.v1.train.Optimizer)
    assert opt.get_name() == 'DistributedGradientDescentOptimizer'
    # w starts at rank 0's zeros: gradient 0 everywhere, nothing moves.
    assert np.allclose(w, 0.0) and step == 1
    start = [1.0, 1.0]
    w, _, _ = _tf1_train(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1), 1,
                         initial=start)
    mean_sq = np.mean([(k + 1.0) ** 2 for k in range(n())])
    want = np.array(start) - 0.1 * mean_sq * np.array([1.0, 4.0])
    assert np.allclose(w, want)
    assert np.allclose(hvd.allgather(tf.constant([w])).numpy(), [w] * n())


def test_legacy_optimizer_slots_and_local_aggregation():
    def momentum():
        return tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)

    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable('w', initializer=tf.constant([1.0]))
        opt = hvd.DistributedOptimizer(momentum())
        opt.minimize(tf.reduce_sum(w * (r() + 1.0)))
        assert opt.get_slot_names() == ['momentum']
        assert opt.get_slot(w, 'momentum') is not None and opt.variables()

    # Two passes per step: the first run applies nothing, the second the summed gradients.
    for average in (False, True):
        results = [_tf1_train(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1), steps,
                              initial=[1.0, 1.0], backward_passes_per_step=2,
                              average_aggregated_gradients=average)[0]
                   for steps in (1, 2)]
        assert np.allclose(results[0], [1.0, 1.0])
        mean_sq = np.mean([(k + 1.0) ** 2 for k in range(n())])
        factor = (1.0 if average else 2.0) * 0.1 * mean_sq
        assert np.allclose(results[1], np.array([1.0, 1.0]) - factor * np.array([1.0, 4.0]))


def test_legacy_optimizer_eager_tf2():
    w = tf.Variable([1.0, 1.0])
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    x = tf.constant([1.0, 2.0]) * (r() + 1)
    opt.minimize(lambda: tf.reduce_sum(tf.square(x * w)) / 2.0, var_list=[w])
    mean_sq = np.mean([(k + 1.0) ** 2 for k in range(n())])
    assert np.allclose(w.numpy(), 1.0 - 0.1 * mean_sq * np.array([1.0, 4.0]))
    # The same update traced into a tf.function.
    w.assign([1.0, 1.0])
    @tf.function
    def traced_step():
        opt.minimize(lambda: tf.reduce_sum(tf.square(x * w)) / 2.0, var_list=[w])

    traced_step()
    assert np.allclose(w.numpy(), 1.0 - 0.1 * mean_sq * np.array([1.0, 4.0]))
    local = tf.Variable([1.0])
    opt.register_local_var(local)
    grads = opt.compute_gradients(lambda: tf.reduce_sum(local * (r() + 1.0)), var_list=[local])
    assert np.allclose(grads[0][0].numpy(), (r() + 1.0) / n())
    with pytest.raises(ValueError, match='backward_passes_per_step'):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                 backward_passes_per_step=2)
    with pytest.raises(ValueError, match='backward_passes_per_step must be > 0'):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                 backward_passes_per_step=0)
    with pytest.raises(ValueError, match="doesn't inherit"):
        hvd.DistributedOptimizer(object())


def test_keras_optimizer_is_delegated():
    try:
        import horovod.tensorflow.keras as hvd_keras
    except ImportError:
        with pytest.raises(ImportError, match='horovod.tensorflow.keras'):
            hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
        return
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
    assert type(opt).__name__ == 'SGD' and hvd_keras is not None


def test_adasum_delta_optimizer_reaches_the_core():
    if n() & (n() - 1):
        pytest.skip('Adasum needs a power-of-2 size')
    w = tf.Variable([1.0])
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                   op=hvd.Adasum)
    opt.minimize(lambda: tf.reduce_sum(w * (r() + 1.0)), var_list=[w])
    assert np.allclose(hvd.allgather(w.value()).numpy(), w.numpy()[0])
    assert np.allclose(hvd.allreduce(tf.ones([1]), op=hvd.Sum).numpy(), n())


# ---- SyncBatchNormalization ----------------------------------------------------------------------

def _unfused_batch_norm(**kwargs):
    """Keras BatchNormalization without the fused kernel (tf-keras picks it for 4-D input; it
    updates the moving variance with the unbiased variance), as SyncBatchNormalization."""
    try:
        return tf.keras.layers.BatchNormalization(fused=False, **kwargs)  # tf-keras
    except (TypeError, ValueError):
        return tf.keras.layers.BatchNormalization(**kwargs)  # Keras 3: never fused


def _sync_bn_step(sizes, tail, seed, in_function=False, **kwargs):
    """One training step of SyncBatchNormalization on this rank's slice (sizes[i] rows on rank i)
    against a plain Keras BatchNormalization on the whole batch: output, moving statistics, input
    gradient, and gamma/beta gradients summed over ranks must agree."""
    rng = np.random.RandomState(seed)
    batch = (rng.normal(size=(sum(sizes),) + tail) * 3.0 + 1.5).astype(np.float32)
    upstream = rng.normal(size=batch.shape).astype(np.float32)  # input gradient not ~0
    lo, hi = sum(sizes[:r()]), sum(sizes[:r() + 1])
    sync = hvd.SyncBatchNormalization(**kwargs)
    plain = _unfused_batch_norm(**kwargs)
    gamma = rng.uniform(0.5, 1.5, size=tail[-1]).astype(np.float32)
    beta = rng.uniform(-1.0, 1.0, size=tail[-1]).astype(np.float32)
    for layer in (sync, plain):
        layer.build(batch.shape)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)

    def forward_backward(layer, x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x, training=True)
            loss = tf.reduce_sum(out * dy)
        dx, dgamma, dbeta = tape.gradient(loss, [x, layer.gamma, layer.beta])
        return out, dx, dgamma, dbeta

    run = tf.function(forward_backward) if in_function else forward_backward
    out, dx, dgamma, dbeta = run(sync, tf.constant(batch[lo:hi]), tf.constant(upstream[lo:hi]))
    want, want_dx, want_dgamma, want_dbeta = forward_backward(plain, tf.constant(batch),
                                                              tf.constant(upstream))
    tol = dict(rtol=1e-4, atol=1e-4)
    assert out.shape == (hi - lo,) + tail
    assert np.allclose(out.numpy(), want.numpy()[lo:hi], **tol)
    assert np.allclose(sync.moving_mean.numpy(), plain.moving_mean.numpy(), **tol)
    assert np.allclose(sync.moving_variance.numpy(), plain.moving_variance.numpy(), **tol)
    assert np.allclose(dx.numpy(), want_dx.numpy()[lo:hi], **tol)
    assert np.allclose(hvd.allreduce(dgamma, op=hvd.Sum).numpy(), want_dgamma.numpy(), **tol)
    assert np.allclose(hvd.allreduce(dbeta, op=hvd.Sum).numpy(), want_dbeta.numpy(), **tol)
    return sync


@pytest.mark.parametrize('in_function', [False, True], ids=['eager', 'tf_function'])
@pytest.mark.parametrize('tail', [(3,), (2, 2, 4)], ids=['2d', '4d'])
@pytest.mark.parametrize('sizes', ['equal', 'unequal', 'one_empty'])
def test_sync_batch_norm_matches_full_batch(sizes, tail, in_function):
    sizes = {'equal': [4] * n(), 'unequal': [2 + 3 * i for i in range(n())],
             'one_empty': [3 + i for i in range(n() - 1)] + [0]}[sizes]
    if sum(sizes) < 2:
        pytest.skip('needs 2 ranks')
    sync = _sync_bn_step(sizes, tail, seed=sum(sizes) + len(tail), in_function=in_function,
                         momentum=0.5)
    assert sync.name.startswith('sync_batch_normalization')


def test_sync_batch_norm_refuses_fused():
    with pytest.raises(ValueError, match='fused'):
        hvd.SyncBatchNormalization(fused=True)


# ---- elastic -------------------------------------------------------------------------------------

def test_elastic_states_save_restore_sync():
    unbuilt = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    with pytest.raises(ValueError, match='Model must be built first'):
        hvd.elastic.TensorFlowKerasState(unbuilt)
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    for v in model.variables:
        v.assign(tf.fill(v.shape, float(r())))
    state = hvd.elastic.TensorFlowKerasState(model, optimizer=tf.keras.optimizers.SGD(0.1),
                                             epoch=r())
    state.sync()
    assert all(np.allclose(v.numpy(), 0.0) for v in model.variables) and state.epoch == 0
    model.variables[0].assign(tf.ones(model.variables[0].shape))
    state.epoch = 5
    state.restore()
    assert np.allclose(model.variables[0].numpy(), 0.0) and state.epoch == 0

    v = tf.Variable([float(r())])
    tstate = hvd.elastic.TensorFlowState([v], batch=3)
    tstate.sync()
    assert v.numpy().tolist() == [0.0]
    v.assign([9.0])
    tstate.commit()
    v.assign([1.0])
    tstate.restore()
    assert v.numpy().tolist() == [9.0] and tstate.batch == 3


def test_elastic_run_converts_horovod_unknown_errors():
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.counter)
        if len(calls) == 1:
            state.counter = 99  # not committed: rolled back
            raise tf.errors.UnknownError(None, None, 'failed in HorovodAllreduce_grad_0')
        if len(calls) == 2:
            raise tf.errors.UnknownError(None, None, 'unrelated')  # swallowed (Horovod quirk)
        return state.counter

    state = hvd.elastic.TensorFlowState([tf.Variable([1.0])], counter=1)
    assert train(state) is None  # first call reset Horovod, the retry hit the unrelated error
    assert calls == [1, 1] and hvd.is_initialized()
    assert train(state) == 1 and calls == [1, 1, 1]
    # Horovod was re-initialized without dynamic sets: restore the fixture's mode.
    hvd.shutdown()
    hvd.init(process_sets='dynamic')
    assert np.allclose(hvd.allreduce(tf.ones([1]), op=hvd.Sum).numpy(), n())
