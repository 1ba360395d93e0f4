"""hvd.SyncBatchNorm on CPU tensors under the launcher (every rank runs every test, in order).

    horovodrun -np 3 python -m pytest -x tests/python/test_torch_sync_batch_norm.py

Each rank normalizes its slice of one global batch (batch sizes differ between ranks, and a rank
may hold none); the result must equal a single-process torch BatchNorm over the whole batch:
forward output, running statistics, input gradient, and weight/bias gradients summed over ranks.
"""

import pytest

torch = pytest.importorskip('torch')

import horovod.torch as hvd  # noqa: E402

torch.set_num_threads(1)

# fp32 tolerance: the ranks' partial sums are combined in a different order than the reference's
TOL = dict(rtol=1e-5, atol=1e-5)
REFERENCE_BN = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d,
                5: torch.nn.BatchNorm3d}


@pytest.fixture(scope='module', autouse=True)
def horovod():
    hvd.init(process_sets='dynamic')
    yield
    hvd.shutdown()


def _pair(channels, affine_seed=5, **kwargs):
    """A SyncBatchNorm and the reference BatchNorm with the same (non-trivial) affine weights."""
    process_set = kwargs.pop('process_set', hvd.global_process_set)
    ref = REFERENCE_BN[kwargs.pop('dims', 4)](channels, **kwargs)
    sync = hvd.SyncBatchNorm(channels, process_set=process_set, **kwargs)
    if sync.affine:
        g = torch.Generator().manual_seed(affine_seed)
        with torch.no_grad():
            for p in ('weight', 'bias'):
                value = torch.rand(channels, generator=g) + 0.5
                getattr(sync, p).copy_(value)
                getattr(ref, p).copy_(value)
    return sync, ref


def _step(sync, ref, sizes, tail, seed, members=None, memory_format=torch.contiguous_format):
    """One forward/backward on this rank's slice (sizes[i] rows for the i-th member) and on the
    whole batch; checks output, input gradient and summed weight/bias gradients."""
    members = list(range(hvd.size())) if members is None else members
    me = members.index(hvd.rank())
    g = torch.Generator().manual_seed(seed)
    channels = sync.num_features
    full = torch.randn(sum(sizes), channels, *tail, generator=g) * 3.0 + 1.5
    upstream = torch.randn(full.shape, generator=g)  # a loss whose input gradient is not ~0
    lo, hi = sum(sizes[:me]), sum(sizes[:me + 1])
    if full.dim() == 4:
        full = full.contiguous(memory_format=memory_format)
    x = full[lo:hi].clone(memory_format=torch.preserve_format).requires_grad_()
    ref_x = full.clone(memory_format=torch.preserve_format).requires_grad_()
    for m in (sync, ref):
        if m.affine:
            m.weight.grad = m.bias.grad = None

    out = sync(x)
    want = ref(ref_x)
    assert out.shape == x.shape
    torch.testing.assert_close(out, want[lo:hi], **TOL)
    (out * upstream[lo:hi]).sum().backward()
    (want * upstream).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad[lo:hi], **TOL)
    if sync.affine:
        process_set = sync.process_set
        for p in ('weight', 'bias'):
            total = hvd.allreduce(getattr(sync, p).grad, op=hvd.Sum, process_set=process_set,
                                  name='sbn_test.' + p)
            torch.testing.assert_close(total, getattr(ref, p).grad, **TOL)
    return out, x


def _check_running_stats(sync, ref):
    if ref.track_running_stats:
        torch.testing.assert_close(sync.running_mean, ref.running_mean, **TOL)
        torch.testing.assert_close(sync.running_var, ref.running_var, **TOL)
        assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked)
    else:
        assert sync.running_mean is None and sync.running_var is None


@pytest.mark.parametrize('tail', [(), (5,), (2, 3), (2, 2, 2)], ids=['2d', '3d', '4d', '5d'])
def test_unequal_batch_sizes_match_the_full_batch(tail):
    sizes = [2 + 3 * i for i in range(hvd.size())]
    sync, ref = _pair(3, dims=2 + len(tail))
    for step in range(3):
        _step(sync, ref, sizes, tail, seed=10 + step)
        _check_running_stats(sync, ref)


def test_a_rank_with_an_empty_batch():
    n = hvd.size()
    sizes = [3 + i for i in range(n)]
    sizes[n - 1] = 0  # the last rank holds nothing
    sync, ref = _pair(4)
    for step in range(2):
        out, x = _step(sync, ref, sizes, (2, 2), seed=20 + step)
        _check_running_stats(sync, ref)
    if hvd.rank() == n - 1:
        assert out.shape == (0, 4, 2, 2) and x.grad.shape == (0, 4, 2, 2)


def test_momentum_none_is_a_cumulative_average():
    sizes = [4 - (i % 2) for i in range(hvd.size())]
    sync, ref = _pair(2, momentum=None)
    for step in range(4):
        _step(sync, ref, sizes, (3, 1), seed=30 + step)
        _check_running_stats(sync, ref)


def test_without_affine_or_running_stats():
    sizes = [1 + i for i in range(hvd.size())]
    sync, ref = _pair(3, affine=False, track_running_stats=False)
    _step(sync, ref, sizes, (2, 2), seed=40)
    _check_running_stats(sync, ref)


def test_eval_mode():
    sizes = [2 + i for i in range(hvd.size())]
    sync, ref = _pair(3)
    _step(sync, ref, sizes, (2, 2), seed=50)
    sync.eval()
    ref.eval()
    # with running statistics: normalized by them, locally (no collective)
    _step(sync, ref, sizes, (2, 2), seed=51)
    _check_running_stats(sync, ref)
    # without: the global batch's statistics, as the reference's batch statistics
    sync, ref = _pair(3, track_running_stats=False)
    sync.eval()
    ref.eval()
    _step(sync, ref, sizes, (2, 2), seed=52)


def test_channels_last():
    sizes = [2 + i for i in range(hvd.size())]
    sync, ref = _pair(5)
    for step in range(2):
        out, x = _step(sync, ref, sizes, (3, 2), seed=60 + step, memory_format=torch.channels_last)
        _check_running_stats(sync, ref)
        assert x.is_contiguous(memory_format=torch.channels_last)
        assert out.is_contiguous(memory_format=torch.channels_last)


def test_process_set():
    n = hvd.size()
    if n == 1:
        pytest.skip('needs 2 ranks')
    # 2 ranks: a one-rank set (plain batch norm on that rank); 3 ranks: ranks 0 and 2 synchronize
    members = [1] if n == 2 else [0, 2]
    process_set = hvd.add_process_set(members)
    try:
        sync, ref = _pair(3, process_set=process_set)
        if hvd.rank() in members:
            for step in range(2):
                _step(sync, ref, [2, 5][:len(members)], (2, 2), seed=70 + step, members=members)
                _check_running_stats(sync, ref)
        else:
            with pytest.raises(ValueError, match='SyncBatchNorm: Rank %d is not a member of the '
                                                 'provided process set' % hvd.rank()):
                sync(torch.randn(2, 3, 2, 2))
    finally:
        hvd.remove_process_set(process_set)


def test_a_single_value_per_channel_fails_on_every_rank():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    sync = hvd.SyncBatchNorm(2)
    x = torch.randn(1 if hvd.rank() == 0 else 0, 2)
    with pytest.raises(ValueError, match=r'expected more than 1 value per channel when training, '
                                         r'got 1 over the process set \(per-rank values per channel: '
                                         r'\[1, 0'):
        sync(x)
    # the job goes on: the next call still matches
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='sbn_test.after').item() == hvd.size()


def test_fewer_than_2_dims_is_refused():
    with pytest.raises(ValueError, match=r'expected at least 2D input \(got 1D input\)'):
        hvd.SyncBatchNorm(3)(torch.randn(3))


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16], ids=['float16', 'bfloat16'])
def test_half_precision_input_is_normalized_in_fp32(dtype):
    sizes = [2 + i for i in range(hvd.size())]
    lo, hi = sum(sizes[:hvd.rank()]), sum(sizes[:hvd.rank() + 1])
    full = (torch.randn(sum(sizes), 3, 4, generator=torch.Generator().manual_seed(80)) * 3 + 1.5).to(dtype)
    sync, ref = _pair(3, dims=3)
    x = full[lo:hi].clone().requires_grad_()
    out = sync(x)
    want = ref(full.float())
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), want[lo:hi], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(sync.running_var, ref.running_var, rtol=1e-5, atol=1e-5)
    out.float().sum().backward()
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
