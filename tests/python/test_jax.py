"""horovod.jax under the launcher (every rank runs every test, in order).

    horovodrun -np 2 python -m pytest -x tests/python/test_jax.py

Eager collectives (dtypes, ops, scaling, ragged allgather, alltoall, process sets, objects), the
same collectives inside jax.jit (run per step, in order, without recompiling), gradients,
pytree broadcast, DistributedOptimizer and the errors. Every test that traces a collective runs
on both jit paths (XLA FFI custom calls and ordered io_callbacks: the ``jit_path`` fixture).
"""

import os

import numpy as np
import pytest

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
jax = pytest.importorskip('jax')

import jax.numpy as jnp  # noqa: E402

import horovod.jax as hvd  # noqa: E402
from horovod.jax import _xla  # noqa: E402
from horovod.common.exceptions import HorovodInternalError  # noqa: E402


@pytest.fixture(scope='module', autouse=True)
def horovod():
    hvd.init(process_sets='dynamic')
    yield
    hvd.shutdown()


@pytest.fixture(params=_xla.PATHS)
def jit_path(request):
    """Collectives traced during the test take this path (both are tested; 'ffi' fails loudly
    if the handlers cannot be used with this jax)."""
    previous = _xla.select(request.param)
    yield request.param
    _xla.select(previous)


def collective_count():
    return sum(hvd.engine_counters().values())


def full(value, shape=(4, 3), dtype=jnp.float32):
    return jnp.full(shape, value, dtype=dtype)


# ---- eager ---------------------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', [jnp.int32, jnp.float16, jnp.bfloat16, jnp.float32, jnp.uint8])
def test_allreduce_sum_dtypes(dtype):
    n, r = hvd.size(), hvd.rank()
    out = hvd.allreduce(full(r + 1, dtype=dtype), op=hvd.Sum, name='sum.' + jnp.dtype(dtype).name)
    assert isinstance(out, jax.Array) and out.dtype == dtype and out.shape == (4, 3)
    np.testing.assert_array_equal(np.asarray(out, np.float64), n * (n + 1) // 2)


def test_allreduce_average_min_max_product_and_scaling():
    n, r = hvd.size(), hvd.rank()
    x = full(r + 1.0)
    np.testing.assert_allclose(hvd.allreduce(x), (n + 1) / 2)
    np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Min), 1.0)
    np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Max), n)
    np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Product), float(np.prod(np.arange(1, n + 1))))
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5 / n)
    np.testing.assert_allclose(got, (n + 1) / 2)
    np.testing.assert_array_equal(x, r + 1.0)  # input untouched


def test_allreduce_average_argument_deprecated():
    x = full(1.0)
    with pytest.warns(DeprecationWarning):
        np.testing.assert_allclose(hvd.allreduce(x, average=False), hvd.size())
    with pytest.raises(ValueError, match='The op parameter supersedes average'):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_grouped_allreduce_and_compression():
    r = hvd.rank()
    xs = [full(r + 1.0, (2,)), full(r + 2.0, (3, 2)), jnp.arange(5, dtype=jnp.int32) * (r + 1)]
    out = hvd.grouped_allreduce(xs, op=hvd.Sum, name='grouped')
    n = hvd.size()
    s = n * (n + 1) // 2
    np.testing.assert_allclose(out[0], s)
    np.testing.assert_allclose(out[1], s + n)
    np.testing.assert_array_equal(out[2], np.arange(5) * s)
    fp16 = hvd.allreduce(full(r + 1.0), compression=hvd.Compression.fp16)
    assert fp16.dtype == jnp.float32
    np.testing.assert_allclose(fp16, (n + 1) / 2)
    with pytest.raises(NotImplementedError, match='bf16'):
        hvd.allreduce(full(1.0), compression=hvd.Compression.bf16)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16, jnp.int32, jnp.bool_])
def test_allgather_ragged(dtype):
    r, n = hvd.rank(), hvd.size()
    x = jnp.full((r + 1, 2), r, dtype=dtype) if dtype != jnp.bool_ else jnp.full((r + 1, 2), r % 2 == 1)
    out = hvd.allgather(x, name='ag.' + jnp.dtype(dtype).name)
    value = (lambda i: i % 2 == 1) if dtype == jnp.bool_ else (lambda i: i)
    want = np.concatenate([np.full((i + 1, 2), value(i)) for i in range(n)]).astype(np.dtype(dtype))
    assert out.dtype == dtype
    np.testing.assert_array_equal(np.asarray(out), want)
    a, b = hvd.grouped_allgather([x, jnp.ones((1,), jnp.float32)], name='gag.' + jnp.dtype(dtype).name)
    np.testing.assert_array_equal(np.asarray(a), want)
    np.testing.assert_array_equal(b, np.ones(n))


def test_broadcast_and_alltoall():
    r, n = hvd.rank(), hvd.size()
    root = n - 1
    out = hvd.broadcast(full(r, dtype=jnp.bfloat16), root_rank=root)
    np.testing.assert_array_equal(np.asarray(out, np.float32), root)
    x = jnp.arange(n * 2, dtype=jnp.float32) + 100 * r
    got = hvd.alltoall(x)
    want = np.concatenate([np.arange(2 * r, 2 * r + 2) + 100 * i for i in range(n)])
    np.testing.assert_array_equal(got, want)
    splits = np.array([1] * (n - 1) + [n * 2 - (n - 1)], dtype=np.int32)
    out, received = hvd.alltoall(x, splits=splits)
    assert received.dtype == jnp.int32 and int(received.sum()) == out.shape[0]
    with pytest.raises(ValueError, match='32-bit integer'):
        hvd.alltoall(x, splits=[0.5] * n)


def test_reducescatter():
    n, r = hvd.size(), hvd.rank()
    x = jnp.arange(n * 2 + 1, dtype=jnp.float32)[:, None] * jnp.ones((1, 2)) * (r + 1)
    out = hvd.reducescatter(x, op=hvd.Sum)
    rows = [(n * 2 + 1) // n + (1 if i < (n * 2 + 1) % n else 0) for i in range(n)]
    start = sum(rows[:r])
    want = np.arange(start, start + rows[r], dtype=np.float32)[:, None] * np.ones((1, 2)) * n * (n + 1) / 2
    np.testing.assert_allclose(out, want)
    with pytest.raises(HorovodInternalError, match='only supports AVERAGE and SUM'):
        hvd.reducescatter(x, op=hvd.Max)


def test_objects_join_barrier():
    r, n = hvd.rank(), hvd.size()
    assert hvd.broadcast_object({'r': r, 'a': [1, 2]}, root_rank=0) == {'r': 0, 'a': [1, 2]}
    assert hvd.allgather_object(('x', r)) == [('x', i) for i in range(n)]
    hvd.barrier()
    assert hvd.join() in range(n)


def test_process_set(jit_path):
    n, r = hvd.size(), hvd.rank()
    members = [1] if n == 2 else [0, n - 1]
    ps = hvd.add_process_set(members)
    want = float(sum(m + 1 for m in members))
    try:
        if r in members:
            x = full(r + 1.0)
            # Named: unnamed calls on a subset would shift this rank's unnamed-call counter.
            np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Sum, process_set=ps, name='ps.a'),
                                       want)
            jitted = jax.jit(lambda v: hvd.allreduce(v, op=hvd.Sum, process_set=ps, name='ps.b'))
            np.testing.assert_allclose(jitted(x), want)
            got = hvd.allgather(jnp.full((1,), r), process_set=ps, name='ps.c')
            np.testing.assert_array_equal(got, members)
    finally:
        hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match='does not exist, or has not been registered'):
        hvd.allreduce(full(1.0), process_set=ps)


def test_errors():
    with pytest.raises(ValueError, match='not supported'):
        hvd.allreduce(jnp.ones(3, jnp.complex64))
    # Mismatched shapes: the core's negotiation error, on every rank.
    with pytest.raises(HorovodInternalError, match='[Mm]ismatched'):
        hvd.allreduce(jnp.ones((hvd.rank() + 1,)), name='mismatch')


# ---- inside jax.jit ------------------------------------------------------------------------------

def test_jit_runs_every_step_in_order_without_recompiling(jit_path):
    r, n = hvd.rank(), hvd.size()
    traces = []

    @jax.jit
    def step(x):
        traces.append(1)
        a = hvd.allreduce(x, op=hvd.Sum, name='jit.a')
        b = hvd.allgather(x[:1], name='jit.b')
        c = hvd.broadcast(x * 3, root_rank=0, name='jit.c')
        d = hvd.reducescatter(jnp.tile(x[None, 0], (n, 1)), op=hvd.Sum, name='jit.d')
        e, f = hvd.grouped_allreduce([x, x.astype(jnp.bfloat16)], op=hvd.Max)
        g = hvd.alltoall(jnp.arange(2.0 * n) + 100 * r)
        return a + 1, b, c, d, e, f, g

    for i in range(3):
        x = full(r + 1.0 + i)
        a, b, c, d, e, f, g = step(x)
        s = sum(j + 1.0 + i for j in range(n))
        np.testing.assert_allclose(a, s + 1)
        np.testing.assert_allclose(b, np.concatenate([np.full((1, 3), j + 1.0 + i) for j in range(n)]))
        np.testing.assert_allclose(c, 3 * (1.0 + i))
        np.testing.assert_allclose(d, np.full((1, 3), s))
        np.testing.assert_allclose(e, n + i)
        assert f.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(f, np.float32), n + i)
        np.testing.assert_array_equal(g, np.concatenate([np.arange(2 * r, 2 * r + 2) + 100 * j
                                                         for j in range(n)]))
    assert len(traces) == 1


def test_jit_collectives_in_scan_and_while_run_in_program_order(jit_path):
    """Unnamed collectives of different shapes, one after another in a lax.scan and a
    lax.while_loop: on every rank the k-th execution of each call matches the others' k-th
    (a reordering across ranks pairs different shapes or iterations: an error or wrong values)."""
    r, n = hvd.rank(), hvd.size()

    def body(carry, i):
        a = hvd.allreduce(jnp.full((3,), (r + 1.0) * (i + 1)), op=hvd.Sum)
        b = hvd.allgather(jnp.reshape(i * n + r, (1,)).astype(jnp.float32))
        c = hvd.broadcast(jnp.full((2, 2), i * 10.0 + r), root_rank=0)
        return carry + a.sum() + b.sum() + c.sum(), (a[0], b, c[0, 0])

    total, (a, b, c) = jax.jit(lambda c0: jax.lax.scan(body, c0, jnp.arange(5)))(jnp.float32(0))
    s = n * (n + 1) / 2
    np.testing.assert_allclose(a, [s * (i + 1) for i in range(5)])
    np.testing.assert_array_equal(b, [[i * n + j for j in range(n)] for i in range(5)])
    np.testing.assert_allclose(c, [i * 10.0 for i in range(5)])

    def cond(state):
        return state[0] < state[1]

    def step(state):
        i, stop, acc = state
        got = hvd.allreduce(jnp.full((3,), i + 1.0), op=hvd.Sum)
        acc = acc + hvd.allreduce(jnp.full((2,), r * 1.0), op=hvd.Max).sum() + got.sum()
        return i + 1, stop, acc

    _, _, acc = jax.jit(lambda stop: jax.lax.while_loop(cond, step, (0, stop, jnp.float32(0))))(7)
    # 2 (n - 1) per turn from the Max, 3 n (i + 1) from the Sum.
    np.testing.assert_allclose(acc, 7 * 2 * (n - 1) + 3 * n * sum(i + 1 for i in range(7)))


def test_jit_collective_with_unused_result_still_runs(jit_path):
    before = collective_count()

    @jax.jit
    def step(x):
        hvd.allreduce(x, name='jit.unused')  # result dropped
        return x * 2

    for _ in range(3):
        jax.block_until_ready(step(jnp.ones(3)))
    jax.effects_barrier()
    assert collective_count() - before == 3

    def body(carry, i):
        hvd.allreduce(carry, name='jit.unused_in_scan')  # result dropped, the scan's used
        return carry + 1, None

    before = collective_count()
    jax.block_until_ready(jax.jit(lambda x: jax.lax.scan(body, x, jnp.arange(2))[0])(jnp.ones(3)))
    jax.effects_barrier()
    assert collective_count() - before == 2


def test_jit_mismatched_shapes_raise_on_every_rank(jit_path):
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    f = jax.jit(lambda x: hvd.allreduce(x, name='jit.mismatch'))
    with pytest.raises(Exception, match='[Mm]ismatched'):
        jax.block_until_ready(f(jnp.ones((hvd.rank() + 1,))))
    # The job goes on: the next collective works on every rank (under another name: a rank that
    # submitted late may still be failing its 'jit.mismatch').
    g = jax.jit(lambda x: hvd.allreduce(x, name='jit.after_mismatch'))
    np.testing.assert_allclose(g(jnp.ones((2,))), 1.0)


def test_jit_allgather_needs_equal_rows(jit_path):
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    f = jax.jit(lambda x: hvd.allgather(x, name='jit.ragged'))
    with pytest.raises(Exception, match='same first dimension'):
        jax.block_until_ready(f(jnp.ones((1 if hvd.rank() == 0 else 2, 2))))


def test_jit_refusals_and_vmap(jit_path):
    with pytest.raises(NotImplementedError, match='alltoall with splits inside jax.jit'):
        jax.jit(lambda x: hvd.alltoall(x, splits=jnp.ones(hvd.size(), jnp.int32)))(jnp.ones(4))
    with pytest.raises(ValueError, match='multiple of the process set size'):
        jax.jit(lambda x: hvd.alltoall(x))(jnp.ones(hvd.size() + 1))
    with pytest.raises(ValueError, match='vmap'):
        jax.vmap(lambda x: hvd.allreduce(x))(jnp.ones((2, 3)))


def test_grad_of_collectives(jit_path):
    r, n = hvd.rank(), hvd.size()
    x = full(r + 1.0, (2,))
    g = jax.jit(jax.grad(lambda v: (hvd.allreduce(v, op=hvd.Sum) * (r + 1)).sum()))(x)
    np.testing.assert_allclose(g, n * (n + 1) / 2)  # Sum of the incoming (r + 1)s
    g = jax.grad(lambda v: hvd.allgather(v).sum() * (r + 1))(x)
    np.testing.assert_allclose(g, (n + 1) / 2)
    g = jax.grad(lambda v: hvd.broadcast(v, root_rank=0).sum())(x)
    np.testing.assert_allclose(g, 1.0 if r == 0 else 0.0)
    v = jnp.arange(2.0 * n)
    g = jax.jit(jax.grad(lambda v: (hvd.reducescatter(v, op=hvd.Average) * (r + 1)).sum()))(v)
    # Every rank's incoming gradient (its r + 1) gathered, divided by the set size.
    np.testing.assert_allclose(g, np.repeat(np.arange(1.0, n + 1) / n, 2))
    with pytest.raises(ValueError, match='gradient of allreduce with op'):
        jax.grad(lambda v: hvd.allreduce(v, op=hvd.Max).sum())(x)


# ---- pytrees and the optimizer -------------------------------------------------------------------

def test_broadcast_parameters_pytree():
    r = hvd.rank()
    params = {'w': full(r + 1.0, (3, 2)), 'layers': [jnp.arange(3) + r, {'b': jnp.ones(2, jnp.bfloat16) * r}]}
    out = hvd.broadcast_parameters(params, root_rank=0)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(params)
    np.testing.assert_allclose(out['w'], 1.0)
    np.testing.assert_array_equal(out['layers'][0], np.arange(3))
    assert out['layers'][1]['b'].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out['layers'][1]['b'], np.float32), 0.0)


def _sgd(lr):
    return hvd.optimizer.GradientTransformation(
        lambda params: (), lambda g, s, p=None: (jax.tree_util.tree_map(lambda x: -lr * x, g), s))


def test_distributed_optimizer_in_jit_and_accumulation(jit_path):
    r, n = hvd.rank(), hvd.size()
    tx = hvd.DistributedOptimizer(_sgd(0.5))
    params = {'w': jnp.zeros(3)}
    state = tx.init(params)

    @jax.jit
    def step(params, state, g):
        updates, state = tx.update(g, state, params)
        return jax.tree_util.tree_map(jnp.add, params, updates), state

    params, state = step(params, state, {'w': jnp.full(3, r + 1.0)})
    np.testing.assert_allclose(params['w'], -0.5 * (n + 1) / 2)

    tx2 = hvd.DistributedOptimizer(_sgd(1.0), backward_passes_per_step=2, op=hvd.Sum)
    s2 = tx2.init(params)
    u, s2 = tx2.update({'w': jnp.full(3, 1.0)}, s2)
    np.testing.assert_allclose(u['w'], 0.0)
    u, s2 = jax.jit(tx2.update)({'w': jnp.full(3, 3.0 + r)}, s2)
    # Local average of the two passes, summed over ranks.
    np.testing.assert_allclose(u['w'], -sum((1.0 + 3.0 + i) / 2 for i in range(n)))
    assert int(s2.passes) == 0


def test_allreduce_gradients_plain_pytree():
    r, n = hvd.rank(), hvd.size()
    g = hvd.allreduce_gradients({'a': full(r * 2.0), 'b': (jnp.ones(2) * r,)})
    np.testing.assert_allclose(g['a'], n - 1.0)
    np.testing.assert_allclose(g['b'][0], (n - 1) / 2)


def test_elastic_state_sync_commit_restore():
    r = hvd.rank()
    state = hvd.elastic.JaxState(params={'w': full(r + 1.0, (2,))}, epoch=r)
    state.sync()
    np.testing.assert_allclose(state.params['w'], 1.0)
    assert state.epoch == 0
    state.params = {'w': full(7.0, (2,))}
    state.save()
    state.params = {'w': full(9.0, (2,))}
    state.restore()
    np.testing.assert_allclose(state.params['w'], 7.0)


def test_adasum():
    n = hvd.size()
    x = jnp.arange(1.0, 7.0)
    if n & (n - 1):
        with pytest.raises(NotImplementedError, match='non-power of 2'):
            hvd.allreduce(x, op=hvd.Adasum)
        return
    # Identical inputs on every rank: the adaptive sum of equal vectors is the vector itself.
    try:
        out = hvd.allreduce(x, op=hvd.Adasum, name='adasum')
    except HorovodInternalError as e:  # a core without Adasum refuses it, on every rank
        assert 'Adasum is not supported' in str(e)
        pytest.skip('this core has no Adasum')
    np.testing.assert_allclose(out, x, rtol=1e-6)


def test_distributed_optimizer_with_optax(jit_path):
    optax = pytest.importorskip('optax')
    r, n = hvd.rank(), hvd.size()
    tx = hvd.DistributedOptimizer(optax.chain(optax.clip_by_global_norm(100.0), optax.sgd(0.1)))
    assert isinstance(tx, optax.GradientTransformation)
    params = {'w': jnp.zeros(2)}
    state = tx.init(params)

    @jax.jit
    def step(params, state):
        grads = jax.grad(lambda p: jnp.sum(p['w'] * (r + 1.0)))(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params, state = step(params, state)
    np.testing.assert_allclose(params['w'], -0.1 * (n + 1) / 2, rtol=1e-6)


# Last: the reset re-initializes Horovod (without dynamic process sets).
def test_elastic_run_restores_after_internal_error():
    r = hvd.rank()
    state = hvd.elastic.JaxState(params={'w': full(r + 1.0, (2,))}, counter=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.counter)
        np.testing.assert_allclose(state.params['w'], 1.0)  # rank 0's, after every sync
        if len(calls) == 1:
            state.counter = 10
            state.params = {'w': full(1.0, (2,))}
            state.commit()
            state.counter = 99  # uncommitted, must be rolled back
            raise HorovodInternalError('simulated failure')
        return state.counter

    assert train(state) == 10
    assert calls == [0, 10]
    assert hvd.is_initialized()
    np.testing.assert_allclose(hvd.allreduce(full(1.0), op=hvd.Sum), hvd.size())
