"""horovod._core at the numpy level: every collective and every dtype numpy has.

Run under the launcher (``horovodrun -np 3 python -m pytest tests/python/test_core.py``); every
rank runs the same tests in the same order, assertions depend on the rank. A plain ``pytest
tests/python`` runs this file through test_distributed.py.
"""

import os

import numpy as np
import pytest

from horovod import _core
from horovod.common.exceptions import HorovodInternalError

from horovod.common import ops
from horovod.common.ops import Average as AVERAGE, Max as MAX, Min as MIN, Product as PRODUCT, \
    Sum as SUM

ALL_DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16,
              np.float32, np.float64, np.bool_]
NUMERIC = [d for d in ALL_DTYPES if d is not np.bool_]
SCALABLE = [np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64]


@pytest.fixture(scope='module', autouse=True)
def core():
    _core.init(None, True)
    yield _core
    # shutdown happens in the last test (so that it is also tested)


def rank():
    return _core.rank()


def size():
    return _core.size()


def run(work):
    work.wait()
    return work


def test_topology():
    assert _core.is_initialized()
    assert rank() == int(os.environ.get('HOROVOD_RANK', '0'))
    assert size() == int(os.environ.get('HOROVOD_SIZE', '1'))
    assert 0 <= _core.local_rank() < _core.local_size() <= size()
    assert 0 <= _core.cross_rank() < _core.cross_size()
    assert isinstance(_core.is_homogeneous(), bool)
    assert _core.process_set_ids()[0] == 0
    assert list(_core.process_set_ranks(0)) == list(range(size()))
    assert _core.gloo_built() and (_core.nccl_built() > 0) == _core.cuda_built()


def local_value(dtype, r, shape=(5, 3)):
    """A rank-dependent tensor small enough that sums and products of 3 ranks stay exact."""
    base = np.arange(np.prod(shape)).reshape(shape) % 3
    if dtype is np.bool_:
        return ((base + r) % 2).astype(np.bool_)
    return (base + r + 1).astype(dtype)


def expected(dtype, op, shape=(5, 3)):
    values = [local_value(dtype, r, shape) for r in range(size())]
    if dtype is np.bool_:
        stack = np.stack(values)
        return stack.any(axis=0) if op in (SUM, MAX) else stack.all(axis=0)
    wide = np.stack([v.astype(np.float64) for v in values])
    if op == SUM:
        out = wide.sum(axis=0)
    elif op == MIN:
        out = wide.min(axis=0)
    elif op == MAX:
        out = wide.max(axis=0)
    elif op == PRODUCT:
        out = wide.prod(axis=0)
    else:
        out = wide.sum(axis=0) * (1.0 / size())  # the core's rule: scale in double, truncate
        if np.issubdtype(dtype, np.integer):
            out = np.trunc(out)
    return out.astype(dtype)


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize('op', [SUM, MIN, MAX, PRODUCT], ids=['sum', 'min', 'max', 'product'])
def test_allreduce_ops(dtype, op):
    x = local_value(dtype, rank())
    out = np.empty_like(x)
    run(_core.allreduce_async(x, out, 'core.ar.%s.%d' % (np.dtype(dtype).name, op), op, 1.0, 1.0,
                              0))
    np.testing.assert_array_equal(out, expected(dtype, op))
    np.testing.assert_array_equal(x, local_value(dtype, rank()))  # input untouched


@pytest.mark.parametrize('dtype', SCALABLE, ids=lambda d: np.dtype(d).name)
def test_allreduce_average_in_place(dtype):
    x = local_value(dtype, rank())
    run(_core.allreduce_async(x, None, 'core.avg.%s' % np.dtype(dtype).name, AVERAGE, 1.0, 1.0,
                              0))
    np.testing.assert_allclose(x.astype(np.float64), expected(dtype, AVERAGE).astype(np.float64),
                               rtol=1e-3)


def test_allreduce_scaling_and_zero_size():
    x = np.full(7, 3, dtype=np.int32)
    out = np.empty_like(x)
    run(_core.allreduce_async(x, out, 'core.scale', SUM, 0.5, 3.0, 0))
    # integers scale in double and truncate: size * trunc(1.5) then * 3
    np.testing.assert_array_equal(out, np.full(7, int(int(3 * 0.5) * size() * 3.0)))
    empty = np.empty((0, 4), dtype=np.float32)
    run(_core.allreduce_async(empty, None, 'core.empty', SUM, 1.0, 1.0, 0))


def test_grouped_allreduce():
    xs = [local_value(d, rank(), (3 + i,)) for i, d in enumerate([np.float32, np.int64,
                                                                  np.float64])]
    outs = [np.empty_like(x) for x in xs]
    run(_core.grouped_allreduce_async(xs, outs, 'core.grouped', SUM, 1.0, 1.0, 0))
    for i, (d, out) in enumerate(zip([np.float32, np.int64, np.float64], outs)):
        np.testing.assert_array_equal(out, expected(d, SUM, (3 + i,)))


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_allgather(dtype):
    x = local_value(dtype, rank(), (rank() + 1, 2))
    work = run(_core.allgather_async(x, 'core.ag.%s' % np.dtype(dtype).name, 0))
    out = np.asarray(work.outputs()[0])
    want = np.concatenate([local_value(dtype, r, (r + 1, 2)) for r in range(size())])
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, want)


def test_allgather_outputs_are_zero_copy():
    work = run(_core.allgather_async(np.ones(4, np.float32), 'core.ag.view', 0))
    result = work.outputs()[0]
    a, b = np.asarray(result), np.asarray(result)
    a[0] = 42.0
    assert b[0] == 42.0  # both views share the engine's buffer
    del work  # the array keeps the storage alive on its own
    assert np.asarray(result)[0] == 42.0


def test_grouped_allgather():
    xs = [np.full((rank() + 1, 3), rank(), np.float32), np.full((2,), rank(), np.int8)]
    work = run(_core.grouped_allgather_async(xs, 'core.gag', 0))
    outs = [np.asarray(o) for o in work.outputs()]
    assert outs[0].shape == (sum(r + 1 for r in range(size())), 3)
    np.testing.assert_array_equal(outs[1], np.repeat(np.arange(size()), 2).astype(np.int8))


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_broadcast(dtype):
    for root in range(size()):
        x = local_value(dtype, rank(), (4,))
        run(_core.broadcast_async(x, root, 'core.bc.%s.%d' % (np.dtype(dtype).name, root), 0))
        np.testing.assert_array_equal(x, local_value(dtype, root, (4,)))


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_alltoall(dtype):
    n = size()
    # rank r sends (r + 1) rows to every rank; row values identify the sender
    x = np.repeat(np.full(n, rank() % 2 if dtype is np.bool_ else rank() + 1), rank() + 1)
    x = x.reshape(-1, 1).repeat(2, axis=1).astype(dtype)
    work = run(_core.alltoall_async(x, [rank() + 1] * n, 'core.a2a.%s' % np.dtype(dtype).name, 0))
    out = np.asarray(work.outputs()[0])
    assert list(work.received_splits()) == [r + 1 for r in range(n)]
    want = np.concatenate([np.full((r + 1, 2), r % 2 if dtype is np.bool_ else r + 1)
                           for r in range(n)]).astype(dtype)
    np.testing.assert_array_equal(out, want)


def test_alltoall_equal_split():
    n = size()
    x = np.arange(2 * n, dtype=np.float32) + 100 * rank()
    work = run(_core.alltoall_async(x, None, 'core.a2a.equal', 0))
    out = np.asarray(work.outputs()[0])
    want = np.concatenate([np.arange(2 * rank(), 2 * rank() + 2) + 100 * r for r in range(n)])
    np.testing.assert_array_equal(out, want.astype(np.float32))


@pytest.mark.parametrize('dtype', NUMERIC, ids=lambda d: np.dtype(d).name)
def test_reducescatter(dtype):
    n = size()
    d = 2 * n + 1  # uneven: the first rank gets one row more
    x = np.ones((d, 2), dtype=dtype) * (rank() + 1)
    rows = d // n + (1 if rank() < d % n else 0)
    out = np.empty((rows, 2), dtype=dtype)
    run(_core.reducescatter_async(x, out, 'core.rs.%s' % np.dtype(dtype).name, SUM, 1.0, 1.0, 0))
    np.testing.assert_array_equal(out, np.full((rows, 2), n * (n + 1) // 2, dtype=dtype))


def test_grouped_reducescatter_average():
    n = size()
    xs = [np.full((n * 2, 3), float(rank()), np.float32), np.full((n,), float(rank()),
                                                                   np.float64)]
    outs = [np.empty((2, 3), np.float32), np.empty((1,), np.float64)]
    run(_core.grouped_reducescatter_async(xs, outs, 'core.grs', AVERAGE, 1.0, 1.0, 0))
    mean = sum(range(n)) / n
    np.testing.assert_allclose(outs[0], mean)
    np.testing.assert_allclose(outs[1], mean)


def test_barrier_and_poll():
    work = _core.barrier_async(0)
    work.wait()
    assert work.poll()


def test_mismatched_shapes_fail_everywhere_then_recover():
    x = np.ones(3 + rank(), np.float32) if size() > 1 else np.ones(3, np.float32)
    work = _core.allreduce_async(x, None, 'core.mismatch', SUM, 1.0, 1.0, 0)
    if size() > 1:
        with pytest.raises(HorovodInternalError, match='Mismatched'):
            work.wait()
    else:
        work.wait()
    y = np.ones(3, np.float32)
    run(_core.allreduce_async(y, None, 'core.after_mismatch', SUM, 1.0, 1.0, 0))
    np.testing.assert_array_equal(y, np.full(3, size(), np.float32))


def test_mismatched_dtypes_fail():
    if size() == 1:
        pytest.skip('needs 2 ranks')
    x = np.ones(3, np.float32 if rank() == 0 else np.int32)
    work = _core.allreduce_async(x, None, 'core.mismatch.dtype', SUM, 1.0, 1.0, 0)
    with pytest.raises(HorovodInternalError, match='Mismatched data types'):
        work.wait()


def test_mismatched_reduce_ops_are_named_on_every_rank():
    if size() == 1:
        pytest.skip('needs 2 ranks')
    x = np.ones(3, np.float32)
    work = _core.allreduce_async(x, None, 'core.mismatch.op', SUM if rank() == 0 else MAX, 1.0, 1.0, 0)
    with pytest.raises(HorovodInternalError) as info:
        work.wait()
    message = str(info.value)
    assert 'Mismatched reduction operation: One rank sent reduction op ' in message, message
    assert 'Sum: rank 0' in message and 'Max: rank' in message, message


def test_duplicate_name_is_value_error():
    # rank 0 enqueues the name twice before any other rank enqueues it
    x = np.ones(2, np.float32)
    first = _core.allreduce_async(x, None, 'core.dup', SUM, 1.0, 1.0, 0) if rank() == 0 else None
    if rank() == 0:
        with pytest.raises(ValueError):
            _core.allreduce_async(np.ones(2, np.float32), None, 'core.dup', SUM, 1.0, 1.0, 0)
    run(_core.barrier_async(0))
    if rank() != 0:
        first = _core.allreduce_async(x, None, 'core.dup', SUM, 1.0, 1.0, 0)
    first.wait()
    np.testing.assert_array_equal(x, np.full(2, size(), np.float32))


def test_dropped_work_keeps_its_arrays_alive():
    import gc
    if rank() == 0:
        x = np.ones(1 << 16, np.float32)
        _core.allreduce_async(x, None, 'core.dropped', SUM, 1.0, 1.0, 0)  # Work dropped at once
        del x
        gc.collect()
    run(_core.barrier_async(0))
    if rank() != 0:
        y = np.ones(1 << 16, np.float32)
        run(_core.allreduce_async(y, None, 'core.dropped', SUM, 1.0, 1.0, 0))
        np.testing.assert_array_equal(y, np.full(1 << 16, size(), np.float32))
    run(_core.barrier_async(0))
    z = np.ones(3, np.float32)  # later operations run normally (and reap the parked arrays)
    run(_core.allreduce_async(z, None, 'core.after_dropped', SUM, 1.0, 1.0, 0))
    np.testing.assert_array_equal(z, np.full(3, size(), np.float32))


def test_bad_arguments():
    with pytest.raises(ValueError, match='contiguous'):
        _core.allreduce_async(np.ones((4, 4), np.float32)[:, 1], None, 'core.nc', SUM, 1.0, 1.0,
                              0)
    with pytest.raises(ValueError):
        _core.allreduce_async(np.ones(2, np.complex64), None, 'core.cplx', SUM, 1.0, 1.0, 0)
    with pytest.raises(ValueError):
        _core.allreduce_async(np.ones(2, np.float32), None, 'core.badset', SUM, 1.0, 1.0, 99)


def test_process_set_allreduce():
    if size() == 1:
        pytest.skip('needs 2 ranks')
    evens = [r for r in range(size()) if r % 2 == 0]
    ps = _core.add_process_set(evens)
    try:
        assert list(_core.process_set_ranks(ps)) == evens
        if rank() in evens:
            x = np.ones(3, np.float32)
            run(_core.allreduce_async(x, None, 'core.ps', SUM, 1.0, 1.0, ps))
            np.testing.assert_array_equal(x, np.full(3, len(evens), np.float32))
        else:
            with pytest.raises(ValueError):
                _core.allreduce_async(np.ones(3, np.float32), None, 'core.ps', SUM, 1.0, 1.0, ps)
    finally:
        assert _core.remove_process_set(ps)
    assert ps not in _core.process_set_ids()


def test_join_returns_last_rank():
    last = run(_core.join_async()).join_result()
    assert 0 <= last < size()
    values = run(_core.allgather_async(np.array([last], np.int32), 'core.join.check', 0))
    assert set(np.asarray(values.outputs()[0]).tolist()) == {last}


def _finisher(work, kind, payload):
    return ('finished', kind, payload)


def _space():
    return _core.HandleSpace(_finisher, ops.ALLREDUCE, ops.UNNAMED)


def test_handle_space_allreduce():
    space = _space()
    assert space.next_handle() == 1
    x = np.ones(4, np.float32)
    h = space.allreduce(x.__dlpack__(), None, x, 'core.h.inplace', SUM, 1.0, 1.0, 0)
    assert h == 2
    assert space.synchronize(h) is x  # the payload, reduced in place
    np.testing.assert_array_equal(x, np.full(4, size(), np.float32))
    assert space.synchronize(h) is None  # a handle completes once
    # Out of place, unnamed (matched by handle order: 'allreduce.noname.3' on every rank), and a
    # plain array instead of a capsule.
    a = np.full((2, 3), rank() + 1, np.int32)
    out = np.zeros((2, 3), np.int32)
    h = space.allreduce(a, out.__dlpack__(), 'payload', None, SUM, 1.0, 1.0, 0)
    assert h == 3
    assert space.synchronize(h) == 'payload'
    np.testing.assert_array_equal(out, np.full((2, 3), size() * (size() + 1) // 2, np.int32))
    np.testing.assert_array_equal(a, np.full((2, 3), rank() + 1, np.int32))
    # Scale factors reach the engine.
    y = np.ones(2, np.float64)
    h = space.allreduce(y.__dlpack__(), None, None, 'core.h.scaled', SUM, 2.0, 0.5, 0)
    assert space.poll(h) in (True, False)
    assert space.synchronize(h) is None
    np.testing.assert_array_equal(y, np.full(2, size(), np.float64))
    assert space.pending == 0


def test_handle_space_names_follow_the_common_rule():
    # The fast path's generated name is ops.op_name's: an allgather named that way by hand on
    # the other ranks matches nothing, but an allreduce under the generated name does.
    space = _space()
    space.next_handle()
    x = np.full(2, rank() + 1, np.float32)
    if rank() == 0:
        h = space.allreduce(x.__dlpack__(), None, None, None, SUM, 1.0, 1.0, 0)
        assert h == 2
        space.synchronize(h)
    else:
        name = ops.op_name(ops.ALLREDUCE, None, 2)
        assert name == 'allreduce.noname.2'
        run(_core.allreduce_async(x, None, name, SUM, 1.0, 1.0, 0, True))
    np.testing.assert_array_equal(x, np.full(2, size() * (size() + 1) / 2, np.float32))


def test_handle_space_tracked_work_and_finisher():
    space = _space()
    h = space.next_handle()
    work = _core.allgather_async(np.full(1, rank(), np.int32), 'core.h.gather', 0)
    space.track(h, work, 'p', 7)
    kind_payload = space.synchronize(h)
    assert kind_payload == ('finished', 7, 'p')
    np.testing.assert_array_equal(np.asarray(work.outputs()[0]), np.arange(size()))
    h = space.next_handle()
    space.track(h, _core.barrier_async(0), 'plain')
    assert space.synchronize(h) == 'plain'
    with pytest.raises(TypeError):
        space.track(space.next_handle(), 'not a work', None)


def test_handle_spaces_are_independent():
    # Two adapters in one process: each has its own counter, table and reset.
    first, second = _space(), _space()
    assert first.next_handle() == 1 and second.next_handle() == 1
    a = np.ones(1 << 10, np.float32)
    b = np.ones(1 << 10, np.float32)
    ha = first.allreduce(a.__dlpack__(), None, a, 'core.h.first', SUM, 1.0, 1.0, 0)
    hb = second.allreduce(b.__dlpack__(), None, b, 'core.h.second', SUM, 1.0, 1.0, 0)
    assert ha == hb == 2
    first.reset()  # the first adapter's hvd.init/shutdown: the second's handle must survive
    assert first.pending == 0 and second.pending == 1
    assert first.synchronize(ha) is None
    assert second.poll(hb) in (True, False)
    assert second.synchronize(hb) is b
    np.testing.assert_array_equal(b, np.full(1 << 10, size(), np.float32))
    assert first.next_handle() == 1  # the reset restarted the first counter only
    assert second.next_handle() == 3
    run(_core.barrier_async(0))  # the dropped operation completed on every rank (its arrays parked)


def test_handle_space_unknown_and_bad_handles():
    space = _space()
    assert space.synchronize(987654321) is None
    assert space.synchronize('not a handle') is None
    assert space.synchronize(1 << 80) is None
    with pytest.raises(ValueError, match='987654321 was not created'):
        space.poll(987654321)
    with pytest.raises(ValueError):
        space.poll(None)


def test_handle_space_bad_arguments():
    space = _space()
    before = space.next_handle()
    with pytest.raises(ValueError, match='contiguous'):
        x = np.ones((4, 4), np.float32)[:, 1]
        space.allreduce(x.__dlpack__(), None, None, 'core.h.nc', SUM, 1.0, 1.0, 0)
    with pytest.raises(ValueError):
        space.allreduce(np.ones(2, np.complex64).__dlpack__(), None, None, 'core.h.cplx', SUM,
                        1.0, 1.0, 0)
    with pytest.raises(ValueError):
        space.allreduce(np.ones(2, np.float32).__dlpack__(), None, None, 'core.h.badset', SUM,
                        1.0, 1.0, 99)
    with pytest.raises(ValueError, match='DLPack capsule or an array'):
        space.allreduce(object(), None, None, 'core.h.obj', SUM, 1.0, 1.0, 0)
    with pytest.raises(TypeError, match='concatenate str'):
        space.allreduce(np.ones(2, np.float32), None, None, 7, SUM, 1.0, 1.0, 0)
    # Failed calls registered nothing; every call took a handle.
    assert space.next_handle() == before + 6
    assert space.pending == 0


def test_handle_space_reset_keeps_pending_arrays_alive():
    import gc
    space = _space()
    if rank() == 0:
        x = np.ones(1 << 16, np.float32)
        space.allreduce(x.__dlpack__(), None, x, 'core.h.dropped', SUM, 1.0, 1.0, 0)
        space.reset()  # drops the pending operation's slot: its capsule is parked
        del x
        gc.collect()
    run(_core.barrier_async(0))
    if rank() != 0:
        y = np.ones(1 << 16, np.float32)
        h = space.allreduce(y.__dlpack__(), None, y, 'core.h.dropped', SUM, 1.0, 1.0, 0)
        np.testing.assert_array_equal(space.synchronize(h), np.full(1 << 16, size(), np.float32))
    run(_core.barrier_async(0))
    z = np.ones(3, np.float32)
    h = space.allreduce(z.__dlpack__(), None, z, 'core.h.after', SUM, 1.0, 1.0, 0)
    np.testing.assert_array_equal(space.synchronize(h), np.full(3, size(), np.float32))


def test_shutdown_then_ops_fail():
    run(_core.barrier_async(0))  # a shutdown fails what other ranks still have pending
    _core.shutdown()
    assert not _core.is_initialized()
    with pytest.raises(HorovodInternalError, match='shut down'):
        _core.allreduce_async(np.ones(2, np.float32), None, 'core.after', SUM, 1.0, 1.0, 0)
    with pytest.raises(ValueError, match='not been initialized'):
        _core.rank()
