"""Every collective on CUDA tensors through horovod._core, under the launcher at 2 and 3 ranks.

Device tensors enter as kDLCUDA DLPack capsules and exporters (dlpack_device.py) over memory the
CUDA runtime allocated (cuda_ctypes.py): the host-memory stand-in in CI (HOROVOD_CUDA_LIBRARY,
HOROVOD_NCCL_LIBRARY), libcudart on a GPU machine. test_gpu_suite.py launches this file once per
data path (HOROVOD_GPU_OPERATIONS=nccl, =host); every rank runs the same tests in the same order.

Inputs are written on a stream of the test's own with an asynchronous copy, and the collective is
told that stream: a backend that did not order its work after it would read the poison the
buffer held before (the stand-in's copies really run later, on the stream's thread).
"""

import os

import ml_dtypes
import numpy as np
import pytest

from horovod import _core
from horovod.common.exceptions import HorovodInternalError
from horovod.common.ops import Adasum as ADASUM, Average as AVERAGE, Max as MAX, Min as MIN, \
    Product as PRODUCT, Sum as SUM

from cuda_ctypes import Cuda, DeviceTensor, download
from dlpack_device import KDLCUDA, describe

BF16 = np.dtype(ml_dtypes.bfloat16)
ALL_DTYPES = [np.dtype(d) for d in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64,
                                    np.float16, np.float32, np.float64, np.bool_)] + [BF16]
# The NCCL path (HOROVOD_GPU_OPERATIONS=nccl); the host-staged path otherwise.
NCCL = os.environ.get('HOROVOD_GPU_OPERATIONS') == 'nccl'
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]


@pytest.fixture(scope='module')
def cuda():
    _core.init(None, True)
    c = Cuda()
    c.set_device(ordinal_of(c))
    yield c
    _core.shutdown()


def ordinal_of(c):
    return _core.local_rank() % c.device_count()


def rank():
    return _core.rank()


def size():
    return _core.size()


class Dev:
    """Device tensors of one test, freed at its end; inputs written on `stream`."""

    def __init__(self, c):
        self.c = c
        self.ordinal = ordinal_of(c)
        self.stream = c.stream()
        self.tensors = []

    def put(self, values, poison=True):
        t = DeviceTensor(self.c, values.shape, values.dtype, self.ordinal)
        self.tensors.append(t)
        if poison:
            self.c.memset(t.address, 0xA5, t.nbytes)
            self.c.sync()
        t.upload(values, self.stream, sync=False)  # visible only through the stream
        return t

    def empty(self, shape, dtype):
        t = DeviceTensor(self.c, shape, dtype, self.ordinal)
        self.tensors.append(t)
        self.c.memset(t.address, 0x5A, t.nbytes)
        self.c.sync()
        return t

    def close(self):
        self.c.sync(self.stream)
        for t in self.tensors:
            t.free()
        self.c.destroy_stream(self.stream)


@pytest.fixture
def dev(cuda):
    d = Dev(cuda)
    yield d
    d.close()


def local_value(dtype, r, shape=(5, 3)):
    """Small rank-dependent values: sums and products of 3 ranks stay exact in every dtype."""
    base = np.arange(int(np.prod(shape))).reshape(shape) % 3
    if dtype == np.bool_:
        return ((base + r) % 2).astype(np.bool_)
    return (base + r + 1).astype(dtype)


def expected(dtype, op, shape=(5, 3), ranks=None):
    values = [local_value(dtype, r, shape) for r in (ranks or range(size()))]
    if dtype == np.bool_:
        stack = np.stack(values)
        return stack.any(axis=0) if op in (SUM, MAX) else stack.all(axis=0)
    wide = np.stack([v.astype(np.float64) for v in values])
    out = {SUM: wide.sum, MIN: wide.min, MAX: wide.max, PRODUCT: wide.prod}[op](axis=0)
    return out.astype(dtype)


def equal(got, want):
    np.testing.assert_array_equal(got.astype(np.float64) if got.dtype == BF16 else got,
                                  want.astype(np.float64) if want.dtype == BF16 else want)


def name(*parts):
    return 'gpu.' + '.'.join(str(p) for p in parts)


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize('op', [SUM, MIN, MAX, PRODUCT], ids=['sum', 'min', 'max', 'product'])
def test_allreduce_every_dtype_and_op(dev, dtype, op):
    x = dev.put(local_value(dtype, rank()))
    out = dev.empty(x.shape, dtype)
    if NCCL and dtype in (np.int16, np.uint16):
        # NCCL has no 16-bit integers: Horovod's error on every rank, never a wrong result.
        with pytest.raises(HorovodInternalError, match='Type %s is not supported in NCCL mode'
                           % dtype.name):
            _core.allreduce_async(x.capsule(), out.capsule(), name('ar', dtype.name, op), op,
                                  1.0, 1.0, 0, stream=dev.stream).wait()
        return
    _core.allreduce_async(x.capsule(), out.capsule(), name('ar', dtype.name, op), op, 1.0, 1.0,
                          0, stream=dev.stream).wait()
    equal(out.download(), expected(dtype, op))
    equal(x.download(), local_value(dtype, rank()))  # input untouched


@pytest.mark.parametrize('dtype', FLOATS, ids=lambda d: d.name)
def test_allreduce_average_in_place_with_scaling(dev, dtype):
    x = dev.put(local_value(dtype, rank()))
    _core.allreduce_async(x, None, name('avg', dtype.name), AVERAGE, 0.5, 4.0, 0,
                          stream=dev.stream).wait()
    want = expected(np.dtype(np.float64), SUM) * 0.5 * 4.0 / size()
    np.testing.assert_allclose(x.download().astype(np.float64), want, rtol=1e-2)


def test_integer_scaling_truncates_as_on_the_cpu(dev):
    x = dev.put(np.full(7, 3, dtype=np.int32))
    out = dev.empty((7,), np.int32)
    _core.allreduce_async(x, out, name('iscale'), SUM, 0.5, 3.0, 0, stream=dev.stream).wait()
    got = out.download()
    # prescale in double then truncated toward zero (3 * 0.5 -> 1, as the CPU path and Horovod's
    # casts), summed, then postscaled: the same answer on every path.
    assert got.dtype == np.int32 and got.tolist() == [1 * size() * 3] * 7


def test_fused_allreduces_and_grouped(dev):
    """Several small tensors in one cycle (fused on the device) and a grouped call."""
    dtypes = [np.float32, np.float32, np.float32, np.float64, np.int64]
    xs = [dev.put(local_value(np.dtype(d), rank(), (3 + i, 2))) for i, d in enumerate(dtypes)]
    works = [_core.allreduce_async(x.capsule(), None, name('fuse', i), SUM, 1.0, 2.0, 0,
                                   stream=dev.stream) for i, x in enumerate(xs)]
    for w in works:
        w.wait()
    for i, (d, x) in enumerate(zip(dtypes, xs)):
        equal(x.download(), (expected(np.dtype(d), SUM, (3 + i, 2)) * 2).astype(d))
    ys = [dev.put(local_value(np.dtype(np.float32), rank(), (4 + i,))) for i in range(3)]
    outs = [dev.empty(y.shape, np.float32) for y in ys]
    _core.grouped_allreduce_async([y.capsule() for y in ys], [o.capsule() for o in outs],
                                  name('grouped'), SUM, 1.0, 1.0, 0, stream=dev.stream).wait()
    for i, o in enumerate(outs):
        equal(o.download(), expected(np.dtype(np.float32), SUM, (4 + i,)))


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=lambda d: d.name)
def test_allgather_ragged_output_on_the_device(dev, dtype):
    x = dev.put(local_value(dtype, rank(), (rank() + 1, 2)))
    work = _core.allgather_async(x.capsule(), name('ag', dtype.name), 0, stream=dev.stream)
    work.wait()
    (result,) = work.outputs()
    address, shape, got_dtype, device = describe(result)
    assert device == (KDLCUDA, dev.ordinal) and got_dtype == dtype
    want = np.concatenate([local_value(dtype, r, (r + 1, 2)) for r in range(size())])
    assert shape == want.shape
    equal(download(dev.c, address, shape, dtype), want)
    del result, work  # the engine's device memory goes back


def test_grouped_allgather(dev):
    xs = [dev.put(local_value(np.dtype(np.int32), rank(), (rank() + 1 + i,))) for i in range(2)]
    work = _core.grouped_allgather_async([x.capsule() for x in xs], name('gag'), 0,
                                         stream=dev.stream)
    work.wait()
    for i, result in enumerate(work.outputs()):
        address, shape, dtype, device = describe(result)
        want = np.concatenate([local_value(np.dtype(np.int32), r, (r + 1 + i,))
                               for r in range(size())])
        equal(download(dev.c, address, shape, dtype), want)


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=lambda d: d.name)
def test_broadcast_in_place(dev, dtype):
    root = size() - 1
    x = dev.put(local_value(dtype, rank(), (4, 3)))
    _core.broadcast_async(x.capsule(), root, name('bc', dtype.name), 0, stream=dev.stream).wait()
    equal(x.download(), local_value(dtype, root, (4, 3)))


def test_alltoall_with_splits(dev):
    # Rank r sends (i + 1) rows to rank i; rows carry (sender, receiver).
    splits = [i + 1 for i in range(size())]
    rows = np.concatenate([np.full((i + 1, 2), [rank(), i], dtype=np.float32)
                           for i in range(size())])
    x = dev.put(rows)
    work = _core.alltoall_async(x.capsule(), splits, name('a2a'), 0, stream=dev.stream)
    work.wait()
    (result,) = work.outputs()
    address, shape, dtype, device = describe(result)
    assert device == (KDLCUDA, dev.ordinal)
    got = download(dev.c, address, shape, dtype)
    want = np.concatenate([np.full((rank() + 1, 2), [s, rank()], dtype=np.float32)
                           for s in range(size())])
    equal(got, want)
    assert list(work.received_splits()) == [rank() + 1] * size()


@pytest.mark.parametrize('op', [SUM, AVERAGE], ids=['sum', 'average'])
def test_reducescatter(dev, op):
    n = size()
    rows = 2 * n + 1
    x = dev.put(local_value(np.dtype(np.float32), rank(), (rows, 2)))
    mine = rows // n + (1 if rank() < rows % n else 0)
    out = dev.empty((mine, 2), np.float32)
    _core.reducescatter_async(x.capsule(), out.capsule(), name('rs', op), op, 1.0, 1.0, 0,
                              stream=dev.stream).wait()
    full = expected(np.dtype(np.float64), SUM, (rows, 2))
    if op == AVERAGE:
        full = full / n
    start = sum(rows // n + (1 if r < rows % n else 0) for r in range(rank()))
    np.testing.assert_allclose(out.download(), full[start:start + mine], rtol=1e-6)


def test_process_set(dev):
    members = [0, size() - 1] if size() >= 3 else [0]  # a set other than the global one
    ps = _core.add_process_set(members)
    try:
        if rank() in members:
            x = dev.put(local_value(np.dtype(np.float32), rank()))
            _core.allreduce_async(x, None, name('ps'), SUM, 1.0, 1.0, ps,
                                  stream=dev.stream).wait()
            equal(x.download(), expected(np.dtype(np.float32), SUM, ranks=members))
            y = dev.put(local_value(np.dtype(np.int64), rank(), (rank() + 1,)))
            work = _core.allgather_async(y, name('ps.ag'), ps, stream=dev.stream)
            work.wait()
            address, shape, dtype, _ = describe(work.outputs()[0])
            equal(download(dev.c, address, shape, dtype),
                  np.concatenate([local_value(np.dtype(np.int64), r, (r + 1,)) for r in members]))
    finally:
        _core.remove_process_set(ps)


def test_unknown_stream_orders_by_the_whole_device(dev):
    """stream=-1: the producer's stream is not told (TensorFlow's GPU kernels), so the backend
    synchronizes the GPU first: the inputs, still being written on the test's stream, arrive
    whole. The allgather output is released after a device synchronize."""
    x = dev.put(local_value(np.dtype(np.float32), rank()))
    _core.allreduce_async(x, None, name('devicewide'), SUM, 1.0, 1.0, 0, stream=-1).wait()
    equal(x.download(), expected(np.dtype(np.float32), SUM))
    y = dev.put(local_value(np.dtype(np.int64), rank(), (rank() + 1, 2)))
    work = _core.allgather_async(y.capsule(), name('devicewide.ag'), 0, stream=-1)
    work.wait()
    (result,) = work.outputs()
    address, shape, _, _ = describe(result)
    want = np.concatenate([local_value(np.dtype(np.int64), r, (r + 1, 2)) for r in range(size())])
    equal(download(dev.c, address, shape, np.dtype(np.int64)), want)
    del result, work


def test_large_allreduce_in_chunks(dev):
    """Larger than a staging chunk and the fusion buffer: the pipelined paths."""
    n = (80 << 20) // 4
    values = (np.arange(n, dtype=np.int64) % 1000).astype(np.float32) + rank()
    x = dev.put(values, poison=False)
    _core.allreduce_async(x, None, name('large'), SUM, 1.0, 1.0, 0, stream=dev.stream).wait()
    got = x.download()
    want = (np.arange(n, dtype=np.int64) % 1000).astype(np.float32) * size() + \
        sum(range(size()))
    np.testing.assert_array_equal(got, want)


def adasum_value(r, n, k=0):
    """Multiples of 1/4 in [-2, 2] (exact in every float dtype), in a pattern that differs by
    rank."""
    i = np.arange(n)
    return ((r * 7 + k * 3 + i * 5 + (r + 1) * (i % 4)) % 17 - 8) / 4.0


def adasum_close(got, want, dtype):
    tolerance = {np.dtype(np.float16): 4e-3, BF16: 3e-2}.get(np.dtype(dtype), 1e-6)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0,
                               atol=tolerance * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize('dtype', FLOATS, ids=lambda d: d.name)
def test_adasum_on_one_host_is_the_average(dev, dtype):
    """Horovod's GPU Adasum averages inside each host and combines the hosts with Adasum: the
    launcher's ranks share one host, so the result is their average (at any rank count), on
    either data path; prescale and postscale apply."""
    x = dev.put(adasum_value(rank(), 37).astype(dtype))
    _core.allreduce_async(x, None, name('adasum', dtype.name), ADASUM, 2.0, 0.5, 0,
                          stream=dev.stream).wait()
    want = np.mean([adasum_value(r, 37) for r in range(size())], axis=0)
    adasum_close(x.download(), want, dtype)


def test_adasum_grouped_tensors_of_different_sizes(dev):
    sizes = [1, 5, 300, 1001]
    xs = [dev.put(adasum_value(rank(), n, k).astype(np.float32)) for k, n in enumerate(sizes)]
    outs = [dev.empty(x.shape, np.float32) for x in xs]
    _core.grouped_allreduce_async([x.capsule() for x in xs], [o.capsule() for o in outs],
                                  name('adasum.grouped'), ADASUM, 1.0, 1.0, 0,
                                  stream=dev.stream).wait()
    for k, (n, o) in enumerate(zip(sizes, outs)):
        want = np.mean([adasum_value(r, n, k) for r in range(size())], axis=0)
        adasum_close(o.download(), want, np.float32)
    algorithms = {algorithm for backend, algorithm, count in _core.engine_counters() if count}
    assert ('nccl_adasum' if NCCL else 'staged_adasum') in algorithms, algorithms


def test_cpu_gpu_mismatch_is_an_error_on_every_rank(dev):
    """Rank 0 on the device, the others on the CPU, same name: Horovod's mismatch error."""
    values = local_value(np.dtype(np.float32), rank())
    if rank() == 0:
        x = dev.put(values)
        arg = x.capsule()
    else:
        arg = values
    with pytest.raises(HorovodInternalError, match='Mismatched ALLREDUCE CPU/GPU device '
                                                   'selection'):
        _core.allreduce_async(arg, None, name('mismatch'), SUM, 1.0, 1.0, 0,
                              stream=dev.stream).wait()
    # The job goes on.
    y = dev.put(values)
    _core.allreduce_async(y, None, name('after.mismatch'), SUM, 1.0, 1.0, 0,
                          stream=dev.stream).wait()
    equal(y.download(), expected(np.dtype(np.float32), SUM))


def test_backend_counters_name_the_path():
    """The collectives above ran through the path asked for (HOROVOD_TEST_GPU_BACKEND, set by
    the launcher), not silently through another."""
    counts = {}
    for backend, algorithm, count in _core.engine_counters():
        counts[backend] = counts.get(backend, 0) + count
    want = os.environ.get('HOROVOD_TEST_GPU_BACKEND')
    if want:
        assert counts.get(want, 0) > 0, counts
