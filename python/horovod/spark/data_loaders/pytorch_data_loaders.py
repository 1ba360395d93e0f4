"""PyTorch data loaders of the Spark estimators, built on horovod.data (Horovod 0.28.1's
``horovod/spark/data_loaders/pytorch_data_loaders.py``).

Horovod built them on a Petastorm reader and Petastorm's DataLoader. This build reads Parquet
with pyarrow (horovod.spark.common.reader), so here ``reader`` is any source of rows:

* an iterable whose every ``iter(reader)`` is one pass over the rows (e.g. the torch
  estimator's epoch of a shard, a list of tuples), or
* a map-style dataset (``__len__`` and ``__getitem__``, no ``__iter__``; e.g. a
  ``torch.utils.data.TensorDataset``), read in index order.

A row is what ``torch.utils.data.default_collate`` takes (a tuple or dict of tensors / numbers /
numpy arrays); the loaders collate ``batch_size`` rows into a batch, the last batch of a pass
possibly smaller (Petastorm's DataLoader did the same).

``shuffling_queue_capacity``: as in Petastorm, rows go through a shuffling buffer of that many
rows (each batch row is drawn at random from the buffer, which refills from the reader); 0 keeps
the reader's order. ``limit_step_per_epoch``: at most that many batches per epoch (-1: no limit).
``name`` prefixes the messages printed with ``verbose``.

PytorchInmemDataLoader / PytorchInmemAsyncDataLoader cache the first rows of the reader in
memory and serve ``num_epochs`` passes over them (Horovod's in-memory loaders). See docs/data.md.
"""

import math
import random

from horovod.data import AsyncDataLoaderMixin, BaseDataLoader

__all__ = ['PytorchDataLoader', 'PytorchAsyncDataLoader', 'PytorchInfiniteDataLoader',
           'PytorchInfiniteAsyncDataLoader', 'PytorchInmemDataLoader', 'PytorchInmemAsyncDataLoader',
           'PytorchShardLoader', 'PytorchShardAsyncLoader']


def _rows(reader):
    """One pass over ``reader``'s rows."""
    if not hasattr(reader, '__iter__') and hasattr(reader, '__getitem__') and hasattr(reader, '__len__'):
        return (reader[i] for i in range(len(reader)))
    return iter(reader)



def _collated(rows, batch_size):
    """``rows`` in batches of ``batch_size`` (the last one may be smaller), each collated into
    tensors by torch's default_collate."""
    from torch.utils.data import default_collate
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) == batch_size:
            yield default_collate(batch)
            batch = []
    if batch:
        yield default_collate(batch)

def _shuffled(rows, capacity, rng):
    """``rows`` through a shuffling buffer of ``capacity`` rows."""
    buffer = []
    for row in rows:
        if len(buffer) < capacity:
            buffer.append(row)
            continue
        i = rng.randrange(capacity)
        buffer[i], row = row, buffer[i]
        yield row
    rng.shuffle(buffer)
    yield from buffer


class PytorchDataLoader(BaseDataLoader):
    """Batches of ``batch_size`` rows of one pass over ``reader`` per epoch (see the module
    docstring for the arguments). ``seed`` seeds the shuffling buffer (None: unseeded)."""

    def __init__(self, reader, batch_size, shuffling_queue_capacity, name="", limit_step_per_epoch=-1,
                 verbose=False, seed=None):
        if not (hasattr(reader, '__iter__') or (hasattr(reader, '__getitem__') and hasattr(reader, '__len__'))):
            raise TypeError('reader must be an iterable of rows or a map-style dataset (__len__ and __getitem__), '
                            'got {}'.format(type(reader).__name__))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError('batch_size must be a positive integer, got {!r}'.format(batch_size))
        if (isinstance(shuffling_queue_capacity, bool) or not isinstance(shuffling_queue_capacity, int)
                or shuffling_queue_capacity < 0):
            raise ValueError('shuffling_queue_capacity must be an integer >= 0 (0: no shuffling), got {!r}'.format(
                shuffling_queue_capacity))
        if (isinstance(limit_step_per_epoch, bool) or not isinstance(limit_step_per_epoch, int)
                or limit_step_per_epoch < -1):
            raise ValueError('limit_step_per_epoch must be -1 (no limit) or an integer >= 0, got {!r}'.format(
                limit_step_per_epoch))
        self.reader = reader
        self.batch_size = batch_size
        self.shuffling_queue_capacity = shuffling_queue_capacity
        self.limit_step_per_epoch = limit_step_per_epoch
        self.name = name
        self.verbose = verbose
        self._rng = random.Random(seed)
        self._print_verbose('[{}]: Initializing data loader with batch_size={}, shuffling_queue_capacity={}, '
                            'limit_step_per_epoch={}'.format(name, batch_size, shuffling_queue_capacity,
                                                             limit_step_per_epoch))

    def __len__(self):
        """Batches per epoch: ceil(rows / batch_size) cut at limit_step_per_epoch when the reader
        has a length; else limit_step_per_epoch, or 0 without a limit (Horovod's value when the
        length cannot be inferred)."""
        if hasattr(self.reader, '__len__'):
            steps = math.ceil(len(self.reader) / self.batch_size)
            return steps if self.limit_step_per_epoch == -1 else min(steps, self.limit_step_per_epoch)
        return self.limit_step_per_epoch if self.limit_step_per_epoch != -1 else 0

    def _batches(self, rows):
        """Collated batches of ``rows`` (through the shuffling buffer)."""
        if self.shuffling_queue_capacity > 0:
            rows = _shuffled(rows, self.shuffling_queue_capacity, self._rng)
        return _collated(rows, self.batch_size)

    def _iterate(self):
        self._print_verbose('[{}]: Start to generate batch data. limit_step_per_epoch={}'.format(
            self.name, self.limit_step_per_epoch))
        batches = self._batches(_rows(self.reader))
        try:
            num_steps = 0
            while num_steps != self.limit_step_per_epoch:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                num_steps += 1
                yield batch
            self._print_verbose('[{}]: Reach limit_step_per_epoch. Stop at step {}.'.format(self.name, num_steps))
        finally:
            batches.close()

    def _print_verbose(self, *args, **kwargs):
        if self.verbose:
            print(*args, **kwargs)


class PytorchAsyncDataLoader(AsyncDataLoaderMixin, PytorchDataLoader):
    """PytorchDataLoader whose batches are prefetched by a background thread
    (horovod.data.AsyncDataLoaderMixin)."""

    def __init__(self, async_loader_queue_size=64, *args, **kwargs):
        super().__init__(async_loader_queue_size, *args, **kwargs)


class PytorchInfiniteDataLoader(PytorchDataLoader):
    """Batches from an endless stream of passes over ``reader`` (a new pass starts where the
    last one ended, without restarting at an epoch boundary); an epoch is
    ``limit_step_per_epoch`` batches (-1: one endless epoch). The shuffling buffer carries over
    between passes, so a batch may hold the end of one pass and the start of the next. A reader
    with a ``num_epochs`` attribute (a Petastorm reader) must have it None, as in Horovod."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if getattr(self.reader, 'num_epochs', None) is not None:
            raise ValueError("Need to set num_epochs as None in reader.")
        self.iterator = None

    def __len__(self):
        return self.limit_step_per_epoch if self.limit_step_per_epoch != -1 else 0

    def _endless_rows(self):
        while True:
            empty = True
            for row in _rows(self.reader):
                empty = False
                yield row
            if empty:
                raise ValueError('[{}]: the reader has no rows: an infinite data loader needs at least one'.format(
                    self.name))

    def _iterate(self):
        if self.iterator is None:
            self.iterator = self._batches(self._endless_rows())
        self._print_verbose('[{}]: Start to generate batch data. limit_step_per_epoch={}'.format(
            self.name, self.limit_step_per_epoch))
        num_steps = 0
        while True:
            if num_steps == self.limit_step_per_epoch:
                self._print_verbose('[{}]: Reach limit_step_per_epoch. Stop at step {}.'.format(self.name, num_steps))
                break
            num_steps += 1
            try:
                batch = next(self.iterator)
            except BaseException:
                self.iterator = None  # the next epoch starts a new stream
                raise
            yield batch


class PytorchInfiniteAsyncDataLoader(AsyncDataLoaderMixin, PytorchInfiniteDataLoader):
    """PytorchInfiniteDataLoader whose batches are prefetched by a background thread."""

    def __init__(self, async_loader_queue_size=64, *args, **kwargs):
        super().__init__(async_loader_queue_size, *args, **kwargs)


class PytorchInmemDataLoader(BaseDataLoader):
    """Horovod's in-memory loader (Petastorm's InMemBatchedDataLoader): reads the first
    ``batch_size * limit_step_per_epoch`` rows of one pass over ``reader`` into memory once,
    then serves batches from ``num_epochs`` passes over those rows (None: endlessly), each pass
    reshuffled with ``shuffle``; a batch may span two passes. Each loader epoch is
    ``limit_step_per_epoch`` batches (required: -1 is a ValueError, as in Horovod); an epoch
    ends early when the ``num_epochs`` passes are used up. ``seed`` seeds the shuffling."""

    def __init__(self, reader, batch_size, num_epochs, name="", shuffle=False, limit_step_per_epoch=-1,
                 verbose=False, seed=None):
        if limit_step_per_epoch == -1:
            raise ValueError('limit_step_per_epoch cannot be -1 for inmem dataloader')
        if not (hasattr(reader, '__iter__') or (hasattr(reader, '__getitem__') and hasattr(reader, '__len__'))):
            raise TypeError('reader must be an iterable of rows or a map-style dataset (__len__ and __getitem__), '
                            'got {}'.format(type(reader).__name__))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError('batch_size must be a positive integer, got {!r}'.format(batch_size))
        if (isinstance(limit_step_per_epoch, bool) or not isinstance(limit_step_per_epoch, int)
                or limit_step_per_epoch <= 0):
            raise ValueError('limit_step_per_epoch must be a positive integer for the inmem dataloader, got '
                             '{!r}'.format(limit_step_per_epoch))
        if num_epochs is not None and (isinstance(num_epochs, bool) or not isinstance(num_epochs, int)
                                       or num_epochs <= 0):
            raise ValueError('num_epochs must be a positive integer or None (endless), got {!r}'.format(num_epochs))
        self.reader = reader
        self.batch_size = batch_size
        self.num_epochs = num_epochs
        self.shuffle = shuffle
        self.limit_step_per_epoch = limit_step_per_epoch
        self.name = name
        self.verbose = verbose
        self._rng = random.Random(seed)
        self._print_verbose('[{}]: Initializing inmem data loader with batch_size={}, num_epochs={}, shuffle={}, '
                            'limit_step_per_epoch={}'.format(name, batch_size, num_epochs, shuffle,
                                                             limit_step_per_epoch))
        self.rows = []
        for row in _rows(reader):
            if len(self.rows) == batch_size * limit_step_per_epoch:
                break
            self.rows.append(row)
        if not self.rows:
            raise ValueError('[{}]: the reader has no rows'.format(name))
        self.iterator = self._batches()

    def __len__(self):
        return self.limit_step_per_epoch

    def _stream(self):
        passes = 0
        while self.num_epochs is None or passes < self.num_epochs:
            order = list(range(len(self.rows)))
            if self.shuffle:
                self._rng.shuffle(order)
            for i in order:
                yield self.rows[i]
            passes += 1

    def _batches(self):
        return _collated(self._stream(), self.batch_size)

    def _iterate(self):
        self._print_verbose('[{}]: Start to generate batch data. limit_step_per_epoch={}'.format(
            self.name, self.limit_step_per_epoch))
        num_steps = 0
        while num_steps != self.limit_step_per_epoch:
            try:
                batch = next(self.iterator)
            except StopIteration:
                self._print_verbose('[{}]: num_epochs={} passes used up at step {}.'.format(
                    self.name, self.num_epochs, num_steps))
                return
            num_steps += 1
            yield batch
        self._print_verbose('[{}]: Reach limit_step_per_epoch. Stop at step {}.'.format(self.name, num_steps))

    def _print_verbose(self, *args, **kwargs):
        if self.verbose:
            print(*args, **kwargs)


class PytorchInmemAsyncDataLoader(AsyncDataLoaderMixin, PytorchInmemDataLoader):
    """PytorchInmemDataLoader whose batches are prefetched by a background thread."""

    def __init__(self, async_loader_queue_size=64, *args, **kwargs):
        super().__init__(async_loader_queue_size, *args, **kwargs)


class PytorchShardLoader(BaseDataLoader):
    """The estimators' loader: the batches of a ``horovod.spark.common.reader.BatchStream``
    (numpy columns streamed from this rank's Parquet shard) as {column: tensor}, each column
    reshaped to ``shapes[column]`` (rows x shape) when given."""

    def __init__(self, stream, shapes=None):
        self.stream, self.shapes = stream, dict(shapes or {})

    def __len__(self):
        return len(self.stream)

    def _iterate(self):
        return iter(self.stream)

    def _process_batch(self, batch):
        import torch
        out = {}
        for column, array in batch.items():
            tensor = torch.from_numpy(array)
            shape = self.shapes.get(column)
            out[column] = tensor.view(-1, *shape) if shape else tensor
        return out


class PytorchShardAsyncLoader(AsyncDataLoaderMixin, PytorchShardLoader):
    """PytorchShardLoader whose batches a background thread prepares ahead, up to
    ``async_loader_queue_size`` of them (horovod.data.AsyncDataLoaderMixin)."""

    def __init__(self, async_loader_queue_size=64, *args, **kwargs):
        super().__init__(async_loader_queue_size, *args, **kwargs)
