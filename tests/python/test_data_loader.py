"""horovod.data (BaseDataLoader, AsyncDataLoaderMixin) and
horovod.spark.data_loaders.pytorch_data_loaders. Single process, except
test_async_loader_trains_under_horovodrun, which runs data_scripts/async_regression_worker.py
under ``horovodrun -np 2`` bounded by a timeout (launch_util; skipped without horovodrun on
PATH)."""

import gc
import os
import threading

import pytest

from horovod.data import AsyncDataLoaderMixin, BaseDataLoader
from horovod.data import data_loader_base

pytestmark = pytest.mark.timeout(300)

HERE = os.path.dirname(os.path.abspath(__file__))
WAIT = 30  # seconds: a failsafe for waits on events, never reached unless something is broken


def loader_threads():
    return [t for t in threading.enumerate() if t.name.startswith('horovod-async-loader')]


class CountingLoader(BaseDataLoader):
    """Yields batches 0..n-1, counting them; raises ``fail_at`` batch index if set."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at
        self.produced = 0
        self.cond = threading.Condition()

    def __len__(self):
        return self.n

    def _iterate(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise KeyError('bad batch {}'.format(i))
            with self.cond:
                self.produced += 1
                self.cond.notify_all()
            yield i

    def _process_batch(self, batch):
        return ('processed', batch)

    def wait_produced(self, count):
        with self.cond:
            return self.cond.wait_for(lambda: self.produced >= count, timeout=WAIT)


class AsyncCountingLoader(AsyncDataLoaderMixin, CountingLoader):
    pass


def test_exports():
    assert data_loader_base.BaseDataLoader is BaseDataLoader
    assert data_loader_base.AsyncDataLoaderMixin is AsyncDataLoaderMixin
    p = pdl()
    for name in ('PytorchDataLoader', 'PytorchAsyncDataLoader', 'PytorchInfiniteDataLoader',
                 'PytorchInfiniteAsyncDataLoader', 'PytorchInmemDataLoader', 'PytorchInmemAsyncDataLoader'):
        assert name in p.__all__
    assert p.PytorchAsyncDataLoader.__mro__[1] is AsyncDataLoaderMixin


def test_base_interface():
    base = BaseDataLoader()
    with pytest.raises(NotImplementedError):
        len(base)
    with pytest.raises(NotImplementedError):
        list(base)
    assert base._process_batch(5) == 5


@pytest.mark.parametrize('queue_size', [0, 1, 3, 64])
def test_order_and_completeness(queue_size):
    loader = AsyncCountingLoader(queue_size, n=50)
    assert loader.async_loader_queue_size == queue_size and len(loader) == 50
    for _ in range(3):  # each iteration is one epoch
        assert list(loader) == [('processed', i) for i in range(50)]
    assert loader_threads() == []


def test_sync_loader_order_and_no_thread():
    loader = CountingLoader(10)
    assert list(loader) == [('processed', i) for i in range(10)]
    sync = AsyncCountingLoader(0, n=10)
    it = iter(sync)
    assert next(it) == ('processed', 0)
    assert sync.produced == 1  # no prefetching: _iterate runs in the consumer
    assert loader_threads() == []


def test_default_queue_size_and_pass_through():
    loader = AsyncCountingLoader(n=3)
    assert loader.async_loader_queue_size == 64 and loader.n == 3
    loader = AsyncCountingLoader(2, 7, fail_at=None)
    assert loader.async_loader_queue_size == 2 and loader.n == 7


@pytest.mark.parametrize('bad', [-1, 1.5, '4', True, None])
def test_bad_queue_size_is_named(bad):
    with pytest.raises(ValueError, match='async_loader_queue_size'):
        AsyncCountingLoader(bad, n=3)


@pytest.mark.parametrize('queue_size', [1, 4])
def test_queue_is_bounded(queue_size):
    loader = AsyncCountingLoader(queue_size, n=40)
    consumed = 0
    it = iter(loader)
    first = next(it)
    consumed += 1
    assert first == ('processed', 0)
    # The producer fills the queue and blocks holding one more batch...
    assert loader.wait_produced(consumed + queue_size + 1)
    for batch in it:
        # ... and never runs further ahead than that.
        assert loader.produced <= consumed + queue_size + 1, (loader.produced, consumed)
        assert batch == ('processed', consumed)
        consumed += 1
        assert loader.produced <= consumed + queue_size + 1, (loader.produced, consumed)
    assert consumed == 40 and loader.produced == 40


def test_producer_exception_surfaces_in_consumer():
    loader = AsyncCountingLoader(2, n=10, fail_at=5)
    it = iter(loader)
    got = [next(it) for _ in range(5)]
    assert got == [('processed', i) for i in range(5)]
    with pytest.raises(KeyError, match='bad batch 5'):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert loader_threads() == []
    # The loader stays usable: a new epoch starts a new producer.
    loader.fail_at = None
    assert len(list(loader)) == 10


def test_exception_from_first_batch_and_sync_mode():
    with pytest.raises(KeyError, match='bad batch 0'):
        list(AsyncCountingLoader(4, n=3, fail_at=0))
    with pytest.raises(KeyError, match='bad batch 1'):
        list(AsyncCountingLoader(0, n=3, fail_at=1))
    assert loader_threads() == []


def test_none_and_exception_objects_are_batches():
    class Odd(BaseDataLoader):
        def __len__(self):
            return 3

        def _iterate(self):
            yield None
            yield ValueError('a batch, not an error')
            yield 3

    class AsyncOdd(AsyncDataLoaderMixin, Odd):
        pass

    got = list(AsyncOdd(1))
    assert got[0] is None and isinstance(got[1], ValueError) and got[2] == 3


def test_early_stop_leaves_no_thread():
    loader = AsyncCountingLoader(2, n=1000)
    for batch in loader:
        assert loader_threads() != []
        if batch[1] == 3:
            break
    gc.collect()
    assert loader_threads() == []
    assert loader.produced < 1000
    # A new epoch starts over.
    assert next(iter(loader)) == ('processed', 0)


def test_close_async_loader_stops_a_blocked_producer():
    loader = AsyncCountingLoader(2, n=1000)
    it = iter(loader)
    assert next(it) == ('processed', 0)
    assert loader.wait_produced(4)  # the producer is blocked on the full queue
    assert len(loader_threads()) == 1
    loader.close_async_loader()
    assert loader_threads() == []
    with pytest.raises(StopIteration):  # the closed iteration ends
        next(it)
    loader.close_async_loader()  # idempotent
    assert list(loader)[:2] == [('processed', 0), ('processed', 1)]  # usable again
    assert loader_threads() == []


def test_close_from_another_thread_wakes_a_blocked_consumer():
    started = threading.Event()

    class Slow(BaseDataLoader):
        def __len__(self):
            return 2

        def _iterate(self):
            yield 1
            started.set()
            release.wait(WAIT)
            yield 2

    class AsyncSlow(AsyncDataLoaderMixin, Slow):
        pass

    release = threading.Event()
    loader = AsyncSlow(1)
    it = iter(loader)
    assert next(it) == 1
    assert started.wait(WAIT)
    result = []
    consumer = threading.Thread(target=lambda: result.append(list(it)))
    consumer.start()  # blocks in the queue's get(): the producer is waiting for `release`
    closer = threading.Thread(target=loader.close_async_loader)
    closer.start()
    release.set()
    closer.join(WAIT)
    consumer.join(WAIT)
    assert not consumer.is_alive() and not closer.is_alive()
    assert result in ([[]], [[2]])
    assert loader_threads() == []


def test_delete_loader_and_iterator_leaves_no_thread():
    loader = AsyncCountingLoader(2, n=1000)
    it = iter(loader)
    next(it)
    assert loader.wait_produced(4)
    del it, loader
    gc.collect()
    assert loader_threads() == []


def test_del_calls_close():
    loader = AsyncCountingLoader(2, n=1000)
    it = iter(loader)
    next(it)
    loader.__del__()
    assert loader_threads() == []
    with pytest.raises(StopIteration):
        next(it)


def test_new_iteration_replaces_the_one_in_progress():
    loader = AsyncCountingLoader(2, n=100)
    old = iter(loader)
    next(old)
    new = iter(loader)
    assert next(new) == ('processed', 0)
    assert len(loader_threads()) == 1
    with pytest.raises(RuntimeError, match='replaced by a newer iter'):
        next(old)
    assert len(list(new)) == 99
    assert loader_threads() == []


# --- pytorch_data_loaders ---------------------------------------------------------------

def pdl():
    """The pytorch_data_loaders module (horovod.spark needs pyspark), or skip."""
    pytest.importorskip('torch')
    pytest.importorskip('pyspark')
    from horovod.spark.data_loaders import pytorch_data_loaders
    return pytorch_data_loaders


def dataset(n=10):
    import torch
    return torch.utils.data.TensorDataset(torch.arange(float(n)).view(-1, 1), torch.arange(n))


def labels(batches):
    return [b[1].tolist() for b in batches]


@pytest.mark.parametrize('make', [
    lambda r, **kw: pdl().PytorchDataLoader(r, **kw),
    lambda r, **kw: pdl().PytorchAsyncDataLoader(3, r, **kw),
    lambda r, **kw: pdl().PytorchAsyncDataLoader(0, r, **kw),
], ids=['sync', 'async', 'async0'])
def test_pytorch_loader_batches_like_torch(make):
    import torch
    ds = dataset(10)
    loader = make(ds, batch_size=4, shuffling_queue_capacity=0)
    expected = list(torch.utils.data.DataLoader(ds, batch_size=4))
    for _ in range(2):
        got = list(loader)
        assert len(got) == len(expected) == len(loader) == 3
        for g, e in zip(got, expected):
            assert all(torch.equal(a, b) for a, b in zip(g, e))
    # Plain iterables of rows too (one pass per epoch).
    rows = [(torch.tensor([float(i)]), i) for i in range(5)]
    assert labels(make(rows, batch_size=2, shuffling_queue_capacity=0)) == [[0, 1], [2, 3], [4]]
    assert loader_threads() == []


def test_pytorch_loader_limit_and_len():
    loader = pdl().PytorchDataLoader(dataset(10), 3, 0, limit_step_per_epoch=2)
    assert len(loader) == 2 and labels(loader) == [[0, 1, 2], [3, 4, 5]]
    assert len(pdl().PytorchDataLoader(dataset(10), 3, 0, limit_step_per_epoch=9)) == 4
    assert labels(pdl().PytorchDataLoader(dataset(10), 3, 0, limit_step_per_epoch=0)) == []
    assert len(pdl().PytorchDataLoader(iter([]), 3, 0)) == 0  # length unknown, no limit: Horovod's 0
    assert len(pdl().PytorchDataLoader(iter([]), 3, 0, limit_step_per_epoch=5)) == 5


def test_pytorch_loader_shuffling_buffer():
    loader = pdl().PytorchDataLoader(dataset(100), 10, 16, seed=1)
    epochs = [sum(labels(loader), []) for _ in range(2)]
    for rows in epochs:
        assert sorted(rows) == list(range(100))  # every row once per epoch
    assert epochs[0] != list(range(100)) and epochs[0] != epochs[1]
    # A buffer of capacity c can only move a row back, or at most c - 1 places ahead.
    assert all(pos >= row - 15 for pos, row in enumerate(epochs[0]))
    again = pdl().PytorchDataLoader(dataset(100), 10, 16, seed=1)
    assert sum(labels(again), []) == epochs[0]


def test_pytorch_loader_verbose_and_name(capsys):
    list(pdl().PytorchDataLoader(dataset(4), 2, 0, name='train', limit_step_per_epoch=1, verbose=True))
    out = capsys.readouterr().out
    assert '[train]: Initializing' in out and '[train]: Reach limit_step_per_epoch. Stop at step 1.' in out
    list(pdl().PytorchDataLoader(dataset(4), 2, 0, name='quiet'))
    assert capsys.readouterr().out == ''


@pytest.mark.parametrize('kwargs, name', [
    (dict(batch_size=0), 'batch_size'), (dict(batch_size=2.0), 'batch_size'),
    (dict(shuffling_queue_capacity=-1), 'shuffling_queue_capacity'),
    (dict(shuffling_queue_capacity=None), 'shuffling_queue_capacity'),
    (dict(limit_step_per_epoch=-2), 'limit_step_per_epoch'),
    (dict(limit_step_per_epoch=1.0), 'limit_step_per_epoch'),
])
def test_pytorch_loader_bad_arguments_are_named(kwargs, name):
    args = dict(reader=dataset(4), batch_size=2, shuffling_queue_capacity=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        pdl().PytorchDataLoader(**args)
    with pytest.raises(TypeError, match='reader'):
        pdl().PytorchDataLoader(5, 2, 0)


@pytest.mark.parametrize('make', [
    lambda *a, **kw: pdl().PytorchInfiniteDataLoader(*a, **kw),
    lambda *a, **kw: pdl().PytorchInfiniteAsyncDataLoader(2, *a, **kw),
], ids=['sync', 'async'])
def test_infinite_loaders(make):
    loader = make(dataset(5), 2, 0, limit_step_per_epoch=2)
    assert len(loader) == 2
    # Epochs continue the stream across passes over the reader.
    assert labels(loader) == [[0, 1], [2, 3]]
    assert labels(loader) == [[4, 0], [1, 2]]
    assert labels(loader) == [[3, 4], [0, 1]]
    endless = make(dataset(3), 2, 0)
    assert len(endless) == 0
    got = []
    for batch in endless:
        got.append(batch[1].tolist())
        if len(got) == 5:
            break
    assert got == [[0, 1], [2, 0], [1, 2], [0, 1], [2, 0]]
    gc.collect()
    assert loader_threads() == []


def test_infinite_loader_rejects_num_epochs_and_empty_reader():
    class Reader(list):
        num_epochs = 1

    with pytest.raises(ValueError, match='num_epochs as None'):
        pdl().PytorchInfiniteDataLoader(Reader([1, 2]), 1, 0)
    ok = Reader([(1,), (2,)])
    ok.num_epochs = None
    assert len(list(pdl().PytorchInfiniteDataLoader(ok, 1, 0, limit_step_per_epoch=3))) == 3
    with pytest.raises(ValueError, match='no rows'):
        list(pdl().PytorchInfiniteAsyncDataLoader(2, [], 1, 0, limit_step_per_epoch=1))
    assert loader_threads() == []


def test_subclass_with_own_iterate_and_process_batch():
    class Doubling(pdl().PytorchDataLoader):
        def _process_batch(self, batch):
            return batch[1] * 2

    class AsyncDoubling(AsyncDataLoaderMixin, Doubling):
        pass

    loader = AsyncDoubling(async_loader_queue_size=2, reader=dataset(6), batch_size=3, shuffling_queue_capacity=0)
    assert [b.tolist() for b in loader] == [[0, 2, 4], [6, 8, 10]]
    assert loader_threads() == []


def test_async_loader_trains_under_horovodrun():
    pytest.importorskip('torch')
    from launch_util import run_under_horovodrun
    code, output = run_under_horovodrun([os.path.join(HERE, 'data_scripts', 'async_regression_worker.py')],
                                        timeout=240, env_extra={'HOROVOD_GLOO_TIMEOUT_SECONDS': '60'}, cwd=HERE)
    assert code == 0, output[-8000:]
    assert output.count('converged') == 2, output[-8000:]


@pytest.mark.parametrize('make', [
    lambda *a, **kw: pdl().PytorchInmemDataLoader(*a, **kw),
    lambda *a, **kw: pdl().PytorchInmemAsyncDataLoader(2, *a, **kw),
], ids=['sync', 'async'])
def test_inmem_loaders(make):
    # The first batch_size * limit_step_per_epoch = 6 rows are cached, passes cycle over them.
    loader = make(dataset(10), 2, None, limit_step_per_epoch=3)
    assert len(loader) == 3 and len(loader.rows) == 6
    assert labels(loader) == [[0, 1], [2, 3], [4, 5]]
    assert labels(loader) == [[0, 1], [2, 3], [4, 5]]
    # num_epochs passes, then the epochs end early; a batch may span two passes.
    limited = make(dataset(3), 2, 2, limit_step_per_epoch=2)
    assert labels(limited) == [[0, 1], [2, 0]]
    assert labels(limited) == [[1, 2]]
    assert labels(limited) == []
    shuffled = make(dataset(8), 4, None, shuffle=True, limit_step_per_epoch=2, seed=3)
    epochs = [sum(labels(shuffled), []) for _ in range(3)]
    assert all(sorted(e) == list(range(8)) for e in epochs) and len({tuple(e) for e in epochs}) > 1
    gc.collect()
    assert loader_threads() == []


@pytest.mark.parametrize('kwargs, match', [
    (dict(limit_step_per_epoch=-1), 'cannot be -1 for inmem'),
    (dict(limit_step_per_epoch=0), 'limit_step_per_epoch'),
    (dict(num_epochs=0), 'num_epochs'),
    (dict(num_epochs=1.5), 'num_epochs'),
    (dict(batch_size=-2), 'batch_size'),
    (dict(reader=[]), 'no rows'),
])
def test_inmem_loader_bad_arguments_are_named(kwargs, match):
    args = dict(reader=dataset(4), batch_size=2, num_epochs=None, limit_step_per_epoch=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        pdl().PytorchInmemDataLoader(**args)
