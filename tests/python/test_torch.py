"""horovod.torch collectives under the launcher (every rank runs every test, in order).

    horovodrun -np 3 python -m pytest -x tests/python/test_torch.py

Covers every collective (sync, async, in-place, grouped), dtypes, reduce ops, scaling, process
sets, autograd, join, barrier, error cases and object helpers (spec python-api §1 and §8).
"""

import os
import time
import warnings

import pytest

torch = pytest.importorskip('torch')

import horovod.torch as hvd  # noqa: E402
from horovod import _core  # noqa: E402
from horovod.common.exceptions import HorovodInternalError  # noqa: E402

torch.set_num_threads(1)

REDUCE_DTYPES = [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
                 torch.float64]
GATHER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                 torch.bfloat16, torch.float32, torch.float64, torch.bool]


@pytest.fixture(scope='module', autouse=True)
def horovod():
    hvd.init(process_sets='dynamic')
    yield
    hvd.shutdown()


def dtype_id(d):
    return str(d).replace('torch.', '')


def rank_tensor(dtype, dims, value=None):
    value = hvd.rank() + 1 if value is None else value
    shape = [5] * dims
    if dtype == torch.bool:
        return torch.full(shape, value % 2 == 1, dtype=torch.bool)
    return torch.full(shape, value, dtype=dtype)


# ---- basics --------------------------------------------------------------------------------------

# Plain mpirun / mpiexec (no horovodrun): the job rendezvouses through MPI (docs/mpi.md).
UNDER_MPI = (not os.environ.get('HOROVOD_GLOO_RENDEZVOUS_ADDR') and 'HOROVOD_RANK' not in os.environ
             and ('OMPI_COMM_WORLD_RANK' in os.environ or 'PMI_RANK' in os.environ))


def _launcher_rank_size():
    for rank, size in (('HOROVOD_RANK', 'HOROVOD_SIZE'), ('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE'),
                       ('PMI_RANK', 'PMI_SIZE')):
        if rank in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1

def test_rank_size_match_environment():
    assert hvd.is_initialized()
    assert (hvd.rank(), hvd.size()) == _launcher_rank_size()
    assert hvd.local_size() >= 1 and hvd.cross_size() >= 1
    assert hvd.gloo_built() and hvd.gloo_enabled() and hvd.mpi_enabled() == UNDER_MPI
    # CUDA/NCCL as built (tests/python/test_gpu_build.py checks that against the installation).
    assert hvd.nccl_built() == _core.nccl_built() and isinstance(hvd.nccl_built(), int)
    assert hvd.cuda_built() is bool(_core.cuda_built()) and (hvd.nccl_built() > 0) == hvd.cuda_built()
    assert not hvd.rocm_built() and not hvd.ddl_built()
    assert hvd.global_process_set.ranks == list(range(hvd.size()))
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)


def test_mpi_threads_supported():
    if UNDER_MPI:
        threads = os.environ.get('HOROVOD_MPI_THREADS_DISABLE', '0') in ('', '0')
        assert hvd.mpi_threads_supported() == threads
        return
    with pytest.raises(ValueError, match='Horovod MPI is not enabled'):
        hvd.mpi_threads_supported()


def test_timeline_needs_env():
    if os.environ.get('HOROVOD_TIMELINE'):
        pytest.skip('HOROVOD_TIMELINE set')
    with pytest.raises(ValueError, match='HOROVOD_TIMELINE=DYNAMIC'):
        hvd.start_timeline('/tmp/unused.json')


# ---- allreduce -----------------------------------------------------------------------------------

@pytest.mark.parametrize('dims', [1, 2, 3])
@pytest.mark.parametrize('dtype', REDUCE_DTYPES, ids=dtype_id)
def test_allreduce_sum(dtype, dims):
    x = rank_tensor(dtype, dims)
    out = hvd.allreduce(x, op=hvd.Sum, name='sum.%s.%d' % (dtype_id(dtype), dims))
    n = hvd.size()
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out, torch.full_like(x, n * (n + 1) // 2))
    assert torch.equal(x, rank_tensor(dtype, dims))  # input untouched


@pytest.mark.parametrize('dtype', [torch.int32, torch.int64, torch.float32, torch.float64,
                                   torch.bfloat16], ids=dtype_id)
def test_allreduce_average_identical_inputs(dtype):
    x = torch.arange(17).to(dtype)
    assert torch.equal(hvd.allreduce(x, name='avg.' + dtype_id(dtype)), x)
    assert torch.equal(hvd.allreduce(x, op=hvd.Average), x)


@pytest.mark.parametrize('dtype', [torch.int32, torch.float32, torch.float64], ids=dtype_id)
@pytest.mark.parametrize('op', ['min', 'max', 'product'])
def test_allreduce_min_max_product(dtype, op):
    torch.manual_seed(1234 + hvd.rank())
    x = torch.randint(1, 4, (4, 5)).to(dtype)
    everyone = hvd.allgather(x.unsqueeze(0), name='mmp.inputs.%s.%s' % (op, dtype_id(dtype)))
    hvd_op = {'min': hvd.Min, 'max': hvd.Max, 'product': hvd.Product}[op]
    out = hvd.allreduce(x, op=hvd_op, name='mmp.%s.%s' % (op, dtype_id(dtype)))
    if op == 'min':
        want = everyone.min(dim=0).values
    elif op == 'max':
        want = everyone.max(dim=0).values
    else:
        want = everyone.prod(dim=0).to(dtype)
    assert torch.equal(out, want)


def test_allreduce_bool_extension():
    x = torch.tensor([hvd.rank() == 0, True, False])
    assert torch.equal(hvd.allreduce(x, op=hvd.Max), torch.tensor([True, True, False]))
    want_min = torch.tensor([hvd.size() == 1, True, False])
    assert torch.equal(hvd.allreduce(x, op=hvd.Min), want_min)


def test_allreduce_average_argument_deprecated():
    x = torch.ones(3)
    with pytest.warns(DeprecationWarning):
        assert torch.equal(hvd.allreduce(x, average=False), x * hvd.size())
    with pytest.raises(ValueError, match='The op parameter supersedes average'):
        hvd.allreduce(x, average=True, op=hvd.Sum)


@pytest.mark.parametrize('dtype', [torch.int32, torch.int64, torch.float16, torch.float32,
                                   torch.float64], ids=dtype_id)
def test_allreduce_prescale_postscale(dtype):
    x = torch.arange(1, 18).to(dtype)
    n = hvd.size()
    pre = hvd.allreduce(x, op=hvd.Sum, prescale_factor=1.5, name='pre.' + dtype_id(dtype))
    post = hvd.allreduce(x, op=hvd.Sum, postscale_factor=0.5, name='post.' + dtype_id(dtype))
    if dtype.is_floating_point:
        compute = torch.float32 if dtype == torch.float16 else dtype
        want_pre = n * (1.5 * x.to(compute)).to(dtype)
        want_post = (0.5 * (n * x.to(compute))).to(dtype)
        tol = 1e-2 if dtype == torch.float16 else 1e-5
        assert torch.allclose(pre.double(), want_pre.double(), rtol=tol)
        assert torch.allclose(post.double(), want_post.double(), rtol=tol)
    else:
        want_pre = n * (1.5 * x.double()).to(dtype)
        want_post = (0.5 * (n * x).double()).to(dtype)
        assert torch.equal(pre, want_pre)
        assert torch.equal(post, want_post)


def test_allreduce_in_place_returns_same_object():
    x = torch.ones(6)
    out = hvd.allreduce_(x, op=hvd.Sum, name='inplace')
    assert out is x
    assert torch.equal(x, torch.full((6,), float(hvd.size())))


def test_allreduce_async_is_asynchronous():
    tensors = [torch.ones(1 << 16) for _ in range(20)]

    def submit():
        return [hvd.allreduce_async(t, op=hvd.Sum, name='async.%d' % i)
                for i, t in enumerate(tensors)]

    if hvd.rank() == 0:
        hvd.barrier()  # returns once the others have submitted and polled
        handles = submit()
    else:
        handles = submit()
        if hvd.size() > 1:  # rank 0 has not submitted yet: nothing can have completed
            assert not any(hvd.poll(h) for h in handles)
        hvd.barrier()  # a barrier proceeds while these are pending
    for h in handles:
        out = hvd.synchronize(h)
        assert torch.equal(out, torch.full((1 << 16,), float(hvd.size())))


def test_poll_and_synchronize_unknown_handles():
    with pytest.raises(ValueError, match='was not created or has been cleared'):
        hvd.poll(987654321)
    assert hvd.synchronize(987654321) is None


def test_allreduce_unnamed_ops_match_by_handle_order():
    outs = [hvd.allreduce(torch.full((3,), float(i)), op=hvd.Sum) for i in range(5)]
    for i, out in enumerate(outs):
        assert torch.equal(out, torch.full((3,), float(i * hvd.size())))


def test_allreduce_grad():
    for op, factor in ((hvd.Sum, hvd.size()), (hvd.Average, 1)):
        x = torch.rand(5, 5, requires_grad=True)
        y = hvd.allreduce(x, op=op)
        y.backward(torch.ones(5, 5))
        assert torch.allclose(x.grad, torch.full((5, 5), float(factor)), atol=1e-8)


def test_allreduce_grad_of_non_contiguous_gradient():
    x = torch.rand(4, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum).sum().backward()  # the incoming gradient is an expanded view
    assert torch.equal(x.grad, torch.full((4,), float(hvd.size())))


def test_allreduce_compression():
    x = torch.full((8,), 1.5, dtype=torch.float64)
    for compression in (hvd.Compression.fp16, hvd.Compression.bf16):
        out = hvd.allreduce(x, op=hvd.Sum, compression=compression)
        assert out.dtype == torch.float64
        assert torch.equal(out, torch.full((8,), 1.5 * hvd.size(), dtype=torch.float64))


def test_compression_casts():
    for dtype in (torch.float32, torch.float64):
        c, ctx = hvd.Compression.fp16.compress(torch.ones(3, dtype=dtype))
        assert c.dtype == torch.float16
        assert hvd.Compression.fp16.decompress(c, ctx).dtype == dtype
        c, ctx = hvd.Compression.bf16.compress(torch.ones(3, dtype=dtype))
        assert c.dtype == torch.bfloat16
    c, ctx = hvd.Compression.fp16.compress(torch.ones(3, dtype=torch.int32))
    assert c.dtype == torch.int32
    assert hvd.Compression.fp16.decompress(c, ctx).dtype == torch.int32
    t = torch.ones(2)
    c, ctx = hvd.Compression.none.compress(t)
    assert c is t and hvd.Compression.none.decompress(c, ctx) is t


# ---- grouped allreduce ---------------------------------------------------------------------------

def test_grouped_allreduce_matches_individual():
    tensors = [torch.rand(5 + i) * (hvd.rank() + 1) for i in range(5)]
    singles = [hvd.allreduce(t, name='single.%d' % i) for i, t in enumerate(tensors)]
    grouped = hvd.grouped_allreduce(tensors, name='grouped')
    assert isinstance(grouped, list) and len(grouped) == 5
    for a, b in zip(singles, grouped):
        assert torch.allclose(a, b)
    copies = [t.clone() for t in tensors]
    result = hvd.grouped_allreduce_(copies, name='grouped_inplace')
    assert isinstance(result, tuple) and all(r is c for r, c in zip(result, copies))
    for a, b in zip(singles, copies):
        assert torch.allclose(a, b)
    handle = hvd.grouped_allreduce_async(tensors, op=hvd.Sum)
    outs = hvd.synchronize(handle)
    assert isinstance(outs, tuple)
    for t, o in zip(tensors, outs):
        assert o.shape == t.shape


def test_grouped_allreduce_grad():
    tensors = [torch.rand(3, requires_grad=True) for _ in range(5)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    torch.autograd.backward(outs, [torch.ones(3)] * 5)
    for t in tensors:
        assert torch.allclose(t.grad, torch.full((3,), float(hvd.size())))


# ---- allgather -----------------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', GATHER_DTYPES, ids=dtype_id)
def test_allgather_variable_first_dim(dtype):
    sizes = [17, 32, 81, 12, 15, 23, 22]
    r = hvd.rank()
    fill = (r % 2 == 1) if dtype == torch.bool else r
    x = torch.full((sizes[r % 7], 2, 3), fill, dtype=dtype)
    out = hvd.allgather(x, name='ag.' + dtype_id(dtype))
    counts = [sizes[i % 7] for i in range(hvd.size())]
    assert list(out.shape) == [sum(counts), 2, 3] and out.dtype == dtype
    offset = 0
    for i, c in enumerate(counts):
        block = out[offset:offset + c]
        want = (i % 2 == 1) if dtype == torch.bool else i
        assert torch.equal(block, torch.full_like(block, want))
        offset += c


def test_allgather_async_and_grouped():
    handle = hvd.allgather_async(torch.full((2,), float(hvd.rank())))
    out = hvd.synchronize(handle)
    assert torch.equal(out, torch.arange(hvd.size()).float().repeat_interleave(2))
    outs = hvd.grouped_allgather([torch.full((1,), hvd.rank()), torch.ones(hvd.rank() + 1, 2)])
    assert torch.equal(outs[0], torch.arange(hvd.size()))
    assert outs[1].shape == (sum(range(1, hvd.size() + 1)), 2)


def test_allgather_output_is_writable_and_owned():
    out = hvd.allgather(torch.ones(3))
    out += 1  # engine-allocated memory, handed to torch without a copy
    assert torch.equal(out, torch.full((3 * hvd.size(),), 2.0))


def test_allgather_grad():
    r = hvd.rank()
    x = torch.rand(r + 2, 3, requires_grad=True)
    y = hvd.allgather(x)
    grad = torch.cat([torch.full((i + 2, 3), float(i)) for i in range(hvd.size())])
    y.backward(grad)
    assert torch.allclose(x.grad, torch.full((r + 2, 3), float(r)))


def test_grouped_allgather_grad():
    r = hvd.rank()
    xs = [torch.rand(r + 1, 2, requires_grad=True) for _ in range(3)]
    ys = hvd.grouped_allgather(xs)
    grads = [torch.cat([torch.full((i + 1, 2), float(i)) for i in range(hvd.size())])] * 3
    torch.autograd.backward(ys, grads)
    for x in xs:
        assert torch.allclose(x.grad, torch.full((r + 1, 2), float(r)))


# ---- broadcast -----------------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', GATHER_DTYPES, ids=dtype_id)
def test_broadcast_every_root(dtype):
    for root in range(hvd.size()):
        x = rank_tensor(dtype, 2, value=hvd.rank() + 1)
        before = x.clone()
        out = hvd.broadcast(x, root, name='bc.%s.%d' % (dtype_id(dtype), root))
        assert torch.equal(out, rank_tensor(dtype, 2, value=root + 1))
        assert torch.equal(x, before)  # not in place
        y = rank_tensor(dtype, 2, value=hvd.rank() + 1)
        assert hvd.broadcast_(y, root) is y
        assert torch.equal(y, rank_tensor(dtype, 2, value=root + 1))


def test_broadcast_async_forms():
    root = hvd.size() - 1
    x = torch.full((3,), float(hvd.rank()))
    out = hvd.synchronize(hvd.broadcast_async(x, root))
    assert torch.equal(out, torch.full((3,), float(root)))
    assert hvd.synchronize(hvd.broadcast_async_(x, root)) is x
    assert torch.equal(x, torch.full((3,), float(root)))


def test_broadcast_grad():
    x = torch.rand(4, requires_grad=True)
    hvd.broadcast(x, 0).backward(torch.ones(4))
    want = torch.ones(4) if hvd.rank() == 0 else torch.zeros(4)
    assert torch.equal(x.grad, want)


def test_broadcast_errors():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    with pytest.raises(RuntimeError, match='Mismatched BROADCAST tensor shapes'):
        hvd.broadcast(torch.ones(2 + hvd.rank()), 0, name='bc.err.shape')
    with pytest.raises(RuntimeError, match='Mismatched data types'):
        hvd.broadcast(torch.ones(2, dtype=torch.float32 if hvd.rank() else torch.int32), 0,
                      name='bc.err.dtype')
    with pytest.raises(RuntimeError, match='root'):
        hvd.broadcast(torch.ones(2), hvd.rank(), name='bc.err.root')
    with pytest.raises(ValueError):
        hvd.broadcast(torch.ones(2), hvd.size() + 5, name='bc.err.badroot')


# ---- alltoall ------------------------------------------------------------------------------------

def test_alltoall_with_splits():
    n = hvd.size()
    splits = torch.tensor([hvd.rank() + 1] * n, dtype=torch.int32)
    x = torch.cat([torch.full((hvd.rank() + 1,), r, dtype=torch.int32) for r in range(n)])
    out, received = hvd.alltoall(x, splits=splits)
    assert out.shape[0] == sum(r + 1 for r in range(n))
    assert torch.equal(out, torch.full_like(out, hvd.rank()))
    assert received.dtype == torch.int32
    assert received.tolist() == [r + 1 for r in range(n)]
    out2, received2 = hvd.alltoall(x, splits=[hvd.rank() + 1] * n)
    assert torch.equal(out2, out) and torch.equal(received2, received)


@pytest.mark.parametrize('dtype', GATHER_DTYPES, ids=dtype_id)
def test_alltoall_equal_split(dtype):
    n = hvd.size()
    x = torch.arange(2 * n).to(dtype) if dtype != torch.bool else torch.ones(2 * n,
                                                                              dtype=torch.bool)
    out = hvd.alltoall(x, name='a2a.' + dtype_id(dtype))
    assert isinstance(out, torch.Tensor) and out.shape == (2 * n,)
    if dtype != torch.bool:
        assert torch.equal(out, torch.arange(2 * hvd.rank(), 2 * hvd.rank() + 2).repeat(n)
                           .to(dtype))


def test_alltoall_async_returns_pair():
    n = hvd.size()
    out, received = hvd.synchronize(hvd.alltoall_async(torch.ones(n, 2)))
    assert out.shape == (n, 2) and received.tolist() == [1] * n


def test_alltoall_errors():
    n = hvd.size()
    if n > 1:
        with pytest.raises(ValueError):
            hvd.alltoall(torch.ones(n + 1), name='a2a.err.div')
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(n), splits=[2] * n, name='a2a.err.sum')
    with pytest.raises(ValueError, match='32-bit integer'):
        hvd.alltoall(torch.ones(n), splits=torch.ones(n), name='a2a.err.float')
    with pytest.raises(ValueError, match='1D splits'):
        hvd.alltoall(torch.ones(n), splits=torch.ones(1, n, dtype=torch.int32))


def test_alltoall_rows_past_the_splits_are_not_sent_and_get_no_gradient():
    # Horovod's rule: splits may sum to fewer rows than the tensor has; the rest stays home.
    n = hvd.size()
    x = torch.cat([torch.full((n,), float(hvd.rank())), torch.full((hvd.rank() + 1,), -1.0)])
    x.requires_grad_()
    out, received = hvd.alltoall(x, splits=[1] * n, name='a2a.short')
    assert out.tolist() == [float(r) for r in range(n)] and received.tolist() == [1] * n
    (out * 2).sum().backward()
    assert x.grad.shape == x.shape
    assert x.grad.tolist() == [2.0] * n + [0.0] * (hvd.rank() + 1)


def test_alltoall_grad():
    n = hvd.size()
    x = torch.rand(2 * n, 3, requires_grad=True)
    out, _ = hvd.alltoall(x, splits=[2] * n)
    out.backward(torch.ones_like(out))
    assert torch.equal(x.grad, torch.ones(2 * n, 3))


def test_alltoall_grad_without_splits_returns_the_tensor():
    # Horovod's rule holds on the autograd path too: no splits, no received_splits.
    n = hvd.size()
    x = torch.full((2 * n, 3), float(hvd.rank() + 1), requires_grad=True)
    out = hvd.alltoall(x)
    assert isinstance(out, torch.Tensor) and out.shape == (2 * n, 3)
    (out * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((2 * n, 3), 2.0))
    pair = hvd.alltoall(x.detach(), splits=torch.tensor([2] * n, dtype=torch.int32))
    assert isinstance(pair, tuple) and pair[1].tolist() == [2] * n


# ---- reducescatter -------------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', [torch.int32, torch.int64, torch.float16, torch.float32,
                                   torch.float64, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize('op', ['sum', 'average'])
def test_reducescatter(dtype, op):
    n, r = hvd.size(), hvd.rank()
    x = torch.arange(4 * n).to(dtype).unsqueeze(1).repeat(1, 3)
    out = hvd.reducescatter(x, op=hvd.Sum if op == 'sum' else hvd.Average,
                            name='rs.%s.%s' % (op, dtype_id(dtype)))
    want = x[4 * r:4 * r + 4] * (n if op == 'sum' else 1)
    assert out.dtype == dtype and torch.equal(out, want.to(dtype))


def test_reducescatter_uneven_and_async():
    n, r = hvd.size(), hvd.rank()
    d = 2 * n + 1
    out = hvd.synchronize(hvd.reducescatter_async(torch.ones(d, 2), op=hvd.Sum))
    rows = d // n + (1 if r < d % n else 0)
    assert torch.equal(out, torch.full((rows, 2), float(n)))


def test_reducescatter_errors():
    with pytest.raises(ValueError, match='scalar'):
        hvd.reducescatter(torch.tensor(1.0))
    with pytest.raises(HorovodInternalError, match='Reducescatter currently only supports'):
        hvd.reducescatter(torch.ones(4), op=hvd.Adasum)
    with pytest.raises(RuntimeError):
        hvd.reducescatter(torch.ones(4), op=hvd.Max)


def test_reducescatter_grad():
    n = hvd.size()
    for op, factor in ((hvd.Sum, n), (hvd.Average, 1)):
        x = torch.rand(2 * n, 2, requires_grad=True)
        y = hvd.reducescatter(x, op=op)
        y.backward(torch.ones_like(y))
        assert torch.allclose(x.grad, torch.full((2 * n, 2), float(factor)))


def test_grouped_reducescatter_and_grad():
    n = hvd.size()
    xs = [torch.ones(2 * n, requires_grad=True) for _ in range(5)]
    ys = hvd.grouped_reducescatter(xs, op=hvd.Sum)
    for y in ys:
        assert torch.equal(y.detach(), torch.full((2,), float(n)))
    torch.autograd.backward(ys, [torch.ones(2)] * 5)
    for x in xs:
        assert torch.equal(x.grad, torch.full((2 * n,), float(n)))
    with pytest.raises(ValueError):
        hvd.grouped_reducescatter([torch.ones(n), torch.tensor(1.0)])


# ---- sparse --------------------------------------------------------------------------------------

def test_sparse_allreduce_matches_dense():
    torch.manual_seed(hvd.rank())
    dense = torch.zeros(10, 3)
    rows = torch.randperm(10)[:4]
    dense[rows] = torch.rand(4, 3)
    sparse = dense.to_sparse()
    result = hvd.sparse_allreduce_async(sparse, name='sparse.0', op=hvd.Average)()
    assert result.is_sparse
    want = hvd.allreduce(dense, name='sparse.dense')
    assert torch.allclose(result.to_dense(), want, atol=1e-6)


# ---- process sets --------------------------------------------------------------------------------

def test_process_set_allreduce_and_objects():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    evens = hvd.add_process_set([r for r in range(hvd.size()) if r % 2 == 0])
    odds = hvd.add_process_set(hvd.ProcessSet([r for r in range(hvd.size()) if r % 2 == 1]))
    try:
        assert evens.process_set_id is not None and evens.size() == len(evens.ranks)
        assert str(odds).startswith('ProcessSet(process_set_id=%d, ranks=' % odds.process_set_id)
        mine, other = (evens, odds) if hvd.rank() % 2 == 0 else (odds, evens)
        assert mine.included() and not other.included()
        assert mine.rank() == mine.ranks.index(hvd.rank())
        with pytest.raises(ValueError, match='not part of provided process set'):
            other.rank()
        x = torch.ones(3)
        out = hvd.allreduce(x, op=hvd.Sum, process_set=mine, name='ps.sum')
        assert torch.equal(out, torch.full((3,), float(mine.size())))
        gathered = hvd.allgather(torch.tensor([hvd.rank()]), process_set=mine)
        assert gathered.tolist() == mine.ranks
        obj = hvd.broadcast_object({'root': mine.ranks[0]} if hvd.rank() == mine.ranks[0]
                                   else {}, root_rank=mine.ranks[0], process_set=mine)
        assert obj == {'root': mine.ranks[0]}
        with pytest.raises(ValueError):
            hvd.allreduce(x, process_set=other, name='ps.nonmember')
        hvd.barrier(process_set=mine)
        with pytest.raises(ValueError, match='duplicate process set'):
            hvd.add_process_set(list(evens.ranks))
    finally:
        assert hvd.remove_process_set(evens)
        assert hvd.remove_process_set(odds)
    assert evens.process_set_id is None
    assert not hvd.remove_process_set(hvd.global_process_set)
    assert not hvd.remove_process_set(evens)


def test_process_set_grad():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    members = list(range(max(1, hvd.size() - 1)))  # not the global set
    ps = hvd.add_process_set(members)
    try:
        if hvd.rank() in members:
            x = torch.rand(3, requires_grad=True)
            hvd.allreduce(x, op=hvd.Sum, process_set=ps).backward(torch.ones(3))
            assert torch.equal(x.grad, torch.full((3,), float(len(members))))
    finally:
        hvd.remove_process_set(ps)


# ---- errors --------------------------------------------------------------------------------------

def test_mismatched_shapes_raise_then_recover():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    with pytest.raises(HorovodInternalError, match='Mismatched ALLREDUCE tensor shapes'):
        hvd.allreduce(torch.ones(2 + hvd.rank()), name='err.shape')
    # same element count, different rank (dimensionality)
    shape = (4,) if hvd.rank() == 0 else (2, 2)
    with pytest.raises(RuntimeError):
        hvd.allreduce(torch.ones(shape), name='err.ndim')
    with pytest.raises(RuntimeError, match='Mismatched data types'):
        hvd.allreduce(torch.ones(3, dtype=torch.int32 if hvd.rank() == 0 else torch.float32),
                      name='err.dtype')
    with pytest.raises(RuntimeError):
        hvd.allgather(torch.ones(2, 2 + hvd.rank()), name='err.allgather')
    out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name='err.after')
    assert torch.equal(out, torch.full((3,), float(hvd.size())))


def test_duplicate_name_in_flight():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    for kind in ('allreduce', 'allgather', 'broadcast', 'reducescatter'):
        fn = {'allreduce': lambda t, n: hvd.allreduce_async(t, name=n),
              'allgather': lambda t, n: hvd.allgather_async(t, name=n),
              'broadcast': lambda t, n: hvd.broadcast_async(t, 0, name=n),
              'reducescatter': lambda t, n: hvd.reducescatter_async(t, name=n)}[kind]
        name = 'dup.' + kind
        t = torch.ones(2 * hvd.size())
        handle = fn(t, name) if hvd.rank() == 0 else None
        if hvd.rank() == 0:
            with pytest.raises(ValueError, match='same name as another tensor'):
                fn(torch.ones(2 * hvd.size()), name)
            assert not hvd.poll(handle)
        hvd.barrier()  # unrelated ops proceed while the first is pending
        if hvd.rank() != 0:
            handle = fn(t, name)
        hvd.synchronize(handle)


def test_unsupported_tensors():
    with pytest.raises(ValueError, match='Tensor type .* is not supported'):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match='Tensor is required to be contiguous.'):
        hvd.allreduce(torch.ones(4, 4).t())


def test_allreduce_async_fast_path_errors():
    # The fast path checks lazily (only after the core call failed): same errors as the checks.
    with pytest.raises(ValueError, match='Tensor type .* is not supported'):
        hvd.allreduce_async_(torch.ones(2, dtype=torch.complex64), name='fp.cplx')
    with pytest.raises(ValueError, match='Tensor type .* is not supported'):
        hvd.allreduce_async_(torch.empty(2, device='meta'), name='fp.meta')
    with pytest.raises(ValueError, match='Tensor is required to be contiguous.'):
        hvd.allreduce_async_(torch.ones(4, 4).t(), name='fp.nc')
    with pytest.raises(ValueError, match='Process set provided does not exist'):
        hvd.allreduce_async_(torch.ones(2), name='fp.ps', process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match='Process set provided does not exist'):
        hvd.allreduce_async(torch.ones(2), name='fp.ps2', process_set=hvd.ProcessSet([0]))
    with pytest.raises(TypeError):
        hvd.allreduce_async_(torch.ones(2), name=7)
    with pytest.raises(ValueError, match='Tensor type .* is not supported'):
        hvd.grouped_allreduce_async_([torch.ones(2), torch.ones(2, dtype=torch.complex64)])
    # Nothing failed half-way: later operations run normally.
    t = torch.ones(3)
    assert hvd.synchronize(hvd.allreduce_async_(t, name='fp.ok', op=hvd.Sum)) is t
    assert torch.equal(t, torch.full((3,), float(hvd.size())))
    assert torch.equal(hvd.allreduce(torch.ones(2), name='fp.after', op=hvd.Sum),
                       torch.full((2,), float(hvd.size())))


def test_grouped_mixed_devices_message():
    meta = torch.empty(2, device='meta')
    with pytest.raises(RuntimeError, match='same device'):
        hvd.grouped_allreduce([torch.ones(2), meta])


# ---- join / barrier ------------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', [torch.int32, torch.float32])
def test_join_allreduce_zeros_from_joined_rank(dtype):
    n = hvd.size()
    for first_joined in range(n):
        x = torch.full((5,), 6, dtype=dtype)
        if hvd.rank() == first_joined:
            last = hvd.join()
        else:
            out = hvd.allreduce(x, name='join.ar.%d' % first_joined)
            # integers: scaled by 1/n in double, truncated (the core's rule)
            want = int(6 * (n - 1) * (1.0 / n)) if dtype == torch.int32 else 6.0 * (n - 1) / n
            assert torch.allclose(out.double(), torch.full((5,), float(want)).double())
            last = hvd.join()
        assert 0 <= last < n
        # named: until the loop ends, ranks have issued different numbers of calls (the joined
        # rank skipped an allreduce), so unnamed handles would not match yet
        lasts = hvd.allgather(torch.tensor([last]), name='join.check.%d' % first_joined)
        assert len(set(lasts.tolist())) == 1
        if n > 1:
            assert last != first_joined


def test_join_then_allgather_fails_on_others():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    if hvd.rank() == 0:
        hvd.join()
    else:
        with pytest.raises(RuntimeError):
            hvd.allgather(torch.ones(2), name='join.ag')
        hvd.join()
    # The ranks issued different numbers of calls: re-initialize so that unnamed operations
    # (numbered per process) match again. (A shutdown stops every rank's engine: wait for all.)
    hvd.barrier()
    hvd.shutdown()
    hvd.init(process_sets='dynamic')


def test_barrier_waits_for_slowest():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    hvd.barrier()  # line the ranks up first
    start = time.time()
    if hvd.rank() == 0:
        time.sleep(1.0)
    hvd.barrier()
    assert time.time() - start >= 0.5  # 1 s less the ranks' skew after the first barrier


# ---- objects and parameters ----------------------------------------------------------------------

def test_broadcast_object():
    # the default name is the type's name, so every rank passes a dict
    obj = {'rank': hvd.rank(), 'payload': list(range(100))} if hvd.rank() == 0 else {}
    got = hvd.broadcast_object(obj, root_rank=0)
    assert got == {'rank': 0, 'payload': list(range(100))}
    if hvd.rank() == 0:
        assert got is obj


def test_allgather_object():
    objs = hvd.allgather_object({'rank': hvd.rank(), 'data': 'x' * hvd.rank()})
    assert objs == [{'rank': r, 'data': 'x' * r} for r in range(hvd.size())]


def test_broadcast_parameters_from_state_dict():
    torch.manual_seed(hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for name, value in model.state_dict().items():
        root = hvd.broadcast(value, 0, name='check.' + name)
        assert torch.equal(value, root)
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=0)
    hvd.broadcast_parameters(list(model.parameters()), root_rank=0)
    with pytest.raises(ValueError, match='invalid params of type'):
        hvd.broadcast_parameters(model.named_parameters(), root_rank=0)


def test_static_process_sets_at_init():
    n = hvd.size()
    if n == 1:
        pytest.skip('needs 2 ranks')
    hvd.shutdown()
    first, rest = hvd.ProcessSet([0]), hvd.ProcessSet(range(1, n))
    hvd.init(process_sets=[first, rest])
    try:
        assert (first.process_set_id, rest.process_set_id) == (1, 2)
        mine = first if hvd.rank() == 0 else rest
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=mine, name='static')
        assert torch.equal(out, torch.full((2,), float(mine.size())))
    finally:
        hvd.barrier()  # a shutdown fails what other ranks still have pending
        hvd.shutdown()
        hvd.init(process_sets='dynamic')
    assert first.process_set_id is None


# ---- lifecycle (last: re-initializes) ------------------------------------------------------------

def test_shutdown_and_reinit():
    r, s = hvd.rank(), hvd.size()
    hvd.barrier()  # a shutdown fails what other ranks still have pending
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match='Horovod has not been initialized; use hvd.init().'):
        hvd.rank()
    hvd.init()
    assert hvd.is_initialized() and (hvd.rank(), hvd.size()) == (r, s)
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(s)))


def test_bfloat16_and_bool_extensions():
    out = hvd.allreduce(torch.full((4,), 1.5, dtype=torch.bfloat16), op=hvd.Sum)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, torch.full((4,), 1.5 * hvd.size(), dtype=torch.bfloat16))
    warnings.simplefilter('default')
