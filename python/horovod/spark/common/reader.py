"""Reading a materialized Parquet dataset in a training process, as a stream: each rank takes
every ``size``-th file (Spark writes one per partition, ``partitions_per_process`` per process),
so the ranks read disjoint shards with pyarrow alone, and a shard never has to fit in memory.

``ShardReader(store, path, columns, rank, size, ...)`` reads its shard in chunks (a few MiB of
rows each, page by page from each row group) and hands out batches of numpy arrays
({column: array}): ``reader.epoch(total, batch_size)`` yields exactly ``total`` rows, going
around the shard again when it has fewer rows (every rank must take the same number of steps;
see ``epoch_rows``). What the estimators' reader parameters do:

* ``num_workers`` / ``pool_type``: that many readers decode row groups ahead of training, in
  threads (``'thread'``), in processes (``'process'``, started with ``mp_start_method``, default
  ``spawn``) or in the training thread itself (``'dummy'``, one reader). At most two chunks per
  reader wait decoded, so memory stays bounded whatever the shard's size.
* ``shuffle``: each pass visits the row groups in a new order and rows go through a shuffling
  buffer of ``shuffle_buffer_size`` rows (each batch row drawn at random from the buffer, which
  refills from the stream); by default the rows that fit in 32 MiB.
* ``inmemory_cache_all``: the decoded shard is kept after the first pass, and later epochs are
  served from memory without reading files (for shards that fit).
* ``transform``: a function of a pandas DataFrame (one chunk) returning a DataFrame, applied
  after reading, as Petastorm's TransformSpec was (``transformation_fn``); the reader then
  yields the columns the function leaves (``columns`` minus ``removed_fields`` plus the
  ``edit_fields``' names).

Array columns become 2-D arrays (rows x elements); so do ml vector columns stored as Spark's
vector struct (``compress_sparse_cols``: a sparse vector's indices and values, made dense here).
Integral columns stay integral (labels), the rest float32.

Why not Petastorm (what Horovod used): it is barely maintained and pins old pyarrow; a plain
pyarrow reader needs nothing beyond what Spark's Parquet output already is."""

import itertools
import queue
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ['ShardReader', 'BatchStream', 'Transform', 'read_first_row', 'shard_rows', 'epoch_rows', 'POOL_TYPES']

POOL_TYPES = ('thread', 'process', 'dummy')
CHUNK_BYTES = 4 << 20  # decoded bytes per chunk, about
SHUFFLE_BUFFER_BYTES = 32 << 20  # the default shuffling buffer
_READ_BUFFER = 1 << 20  # pyarrow reads column chunks page by page through a buffer this size
_END = 'end'


def epoch_rows(shard_rows, what):
    """How many rows every rank goes through per epoch, given each rank's shard size
    (``shard_rows``, in rank order): the largest shard's. Every rank must take the same number
    of steps (each training step is a collective), and with the largest count every row of
    every shard is used each epoch; smaller shards go around again. ValueError naming the ranks
    whose ``what`` shard has no rows."""
    empty = [rank for rank, n in enumerate(shard_rows) if n == 0]
    if empty:
        raise ValueError('The {} data of ranks {} is empty (its Parquet files have no rows): use fewer processes, '
                         'more rows, or more partitions_per_process'.format(what, empty))
    return max(shard_rows)


def shard_files(store, path, rank, size):
    """Rank ``rank``'s files of the dataset at ``path``: every ``size``-th. A rank whose shard
    would be empty (fewer files than ranks) reads the first file, so that every rank has rows."""
    files = store.parquet_files(path)
    if not files:
        raise ValueError('No Parquet files under {}: was the data prepared (prepare_data / fit)?'.format(path))
    return files[rank::size] or files[:1]


def shard_rows(store, path, rank, size):
    """The number of rows in rank ``rank``'s shard of the dataset at ``path`` (from the Parquet
    footers; what ``ShardReader(...).rows`` counts)."""
    rows = 0
    for f in shard_files(store, path, rank, size):
        with store.fs.open(f, 'rb') as handle:
            rows += pq.ParquetFile(handle).metadata.num_rows
    return rows


def read_first_row(store, path, columns, transform=None):
    """{column: numpy array of one row} of the dataset at ``path`` (the first row of its first
    non-empty file), as the reader converts (and ``transform`` changes) them; None when the
    dataset has no rows. Lets the driver check the data against the model before any process
    starts."""
    for f in store.parquet_files(path):
        table = pq.read_table(f, columns=columns if transform is None else None, filesystem=store.fs)
        if table.num_rows:
            return to_arrays(table.slice(0, 1), columns) if transform is None else transform.apply(table.slice(0, 1))
    return None


def to_arrays(table, columns):
    """{column: numpy array} of a pyarrow Table or RecordBatch (see the module docstring)."""
    return {c: _column_array(table.column(c)) for c in columns}


def _column_array(column):
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    kind = column.type
    if _is_vector_struct(kind):
        return _dense_vectors(column)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        if len(lengths) and column.null_count == 0 and (lengths == lengths[0]).all():
            values = _column_array(column.flatten())
            return values.reshape(len(column), int(lengths[0]))
        return _as_numbers(np.asarray(column.to_pylist()))  # ragged: as before, numpy decides
    return _as_numbers(column.to_numpy(zero_copy_only=False))


_VECTOR_FIELDS = {'type', 'size', 'indices', 'values'}


def _is_vector_struct(kind):
    """Spark's storage of a pyspark.ml vector: struct<type, size, indices, values> (type 0:
    sparse, with size and indices; 1: dense, values only)."""
    return pa.types.is_struct(kind) and {kind.field(i).name for i in range(kind.num_fields)} == _VECTOR_FIELDS


def _dense_vectors(column):
    """A column of Spark's vector structs as a rows x size float32 array."""
    rows = len(column)
    if column.null_count:
        raise ValueError('a vector column has null rows')
    sparse = column.field('type').to_numpy(zero_copy_only=False) == 0
    values = column.field('values')
    counts = pc.list_value_length(values).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    sizes = np.where(sparse, column.field('size').fill_null(0).to_numpy(zero_copy_only=False), counts)
    if rows and (sizes != sizes[0]).any():
        raise ValueError('a vector column holds vectors of different sizes ({} and {})'.format(
            int(sizes.min()), int(sizes.max())))
    out = np.zeros((rows, int(sizes[0]) if rows else 0), np.float32)
    flat = values.flatten().to_numpy(zero_copy_only=False)
    row_of = np.repeat(np.arange(rows), counts)
    starts = np.cumsum(counts) - counts
    col_of = np.arange(len(flat)) - np.repeat(starts, counts)  # position within the row: dense rows
    sparse_elements = np.repeat(sparse, counts)
    col_of[sparse_elements] = column.field('indices').flatten().to_numpy(zero_copy_only=False)
    out[row_of, col_of] = flat
    return out


def _as_numbers(array):
    if array.dtype.kind in 'fOb':
        return array.astype(np.float32, copy=False)
    return array


class _Unit:
    """One row group of one file: what one reader decodes at a time."""

    def __init__(self, file, row_group, rows):
        self.file, self.row_group, self.rows = file, row_group, rows


def _read_unit(fs, unit, columns, chunk_rows, transform):
    """The chunks ({column: array}) of ``unit``, in order."""
    with fs.open(unit.file, 'rb') as f:
        parquet = pq.ParquetFile(f, buffer_size=_READ_BUFFER)
        read_columns = columns if transform is None else None  # a transformation may use any stored column
        for batch in parquet.iter_batches(batch_size=chunk_rows, row_groups=[unit.row_group], columns=read_columns):
            yield transform.apply(batch) if transform is not None else to_arrays(batch, columns)


class Transform:
    """A ``transformation_fn`` with Petastorm's ``edit_fields`` / ``removed_fields``: it gets every
    stored column of a chunk as a pandas DataFrame, and the reader yields ``output_columns``."""

    def __init__(self, fn, edit_fields=None, removed_fields=None):
        self.fn = fn
        self.edit_fields = list(edit_fields or [])
        self.removed_fields = list(removed_fields or [])

    def output_columns(self, columns):
        out = [c for c in columns if c not in self.removed_fields]
        out += [f[0] for f in self.edit_fields if f[0] not in out]
        return out

    def apply(self, batch):
        frame = batch.to_pandas()
        for name in batch.schema.names:  # ml vectors reach the function as arrays, stored either way
            if _is_vector_struct(batch.schema.field(name).type):
                frame[name] = list(_dense_vectors(batch.column(name)))
        frame = self.fn(frame)
        if frame is None:
            raise ValueError('transformation_fn returned None; it must return the (changed) pandas DataFrame')
        return {name: _as_numbers(_stack(frame[name].to_numpy())) for name in frame.columns}


def _stack(values):
    """A pandas column of per-row arrays as one 2-D array; other columns unchanged."""
    if values.dtype == object and len(values) and isinstance(values[0], (np.ndarray, list, tuple)):
        return np.stack([np.asarray(v) for v in values])
    return values


def _work(fs, columns, chunk_rows, transform, tasks, put, current):
    """A reader's loop: decode the units it takes from ``tasks`` and ``put`` their chunks, then
    (generation, seq, _END); a unit whose generation is no longer ``current()`` (its epoch was cut
    short) is dropped. Errors are put instead of the end, for the training thread to raise."""
    while True:
        task = tasks.get()
        if task is None:
            return
        generation, seq, unit = task
        try:
            for chunk in _read_unit(fs, unit, columns, chunk_rows, transform):
                if generation != current():
                    break
                put((generation, seq, chunk))
            else:
                put((generation, seq, _END))
        except BaseException as e:
            put((generation, seq, RuntimeError('reading row group {} of {}: {!r}'.format(
                unit.row_group, unit.file, e))))


def _process_worker(fs, columns, chunk_rows, transform_bytes, tasks, results, generation):
    import cloudpickle
    transform = cloudpickle.loads(transform_bytes) if transform_bytes is not None else None
    _work(fs, columns, chunk_rows, transform, tasks, results.put, lambda: generation.value)


class ShardReader:
    """This rank's shard of the dataset at ``path`` as a stream of batches (module docstring).
    Use as a context manager, or call ``close()``: it stops the reader threads or processes."""

    def __init__(self, store, path, columns, rank, size, shuffle=False, shuffle_buffer_size=None, num_workers=2,
                 pool_type='thread', inmemory_cache_all=False, seed=0, mp_start_method=None, transform=None):
        if pool_type not in POOL_TYPES:
            raise ValueError('reader_pool_type must be one of {}, got {!r}'.format(', '.join(POOL_TYPES), pool_type))
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError('the reader_num_workers must be a positive integer, got {!r}'.format(num_workers))
        if shuffle_buffer_size is not None and (not isinstance(shuffle_buffer_size, int) or shuffle_buffer_size < 0):
            raise ValueError('shuffle_buffer_size must be a non-negative integer, got {!r}'.format(shuffle_buffer_size))
        self.fs, self.columns, self.transform = store.fs, list(columns), transform
        self.output_columns = transform.output_columns(self.columns) if transform is not None else self.columns
        self.shuffle, self.seed, self.cache_all = shuffle, seed, inmemory_cache_all
        self.units = []
        row_bytes = 0.0
        for f in shard_files(store, path, rank, size):
            with store.fs.open(f, 'rb') as handle:
                meta = pq.ParquetFile(handle).metadata
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                if group.num_rows:
                    self.units.append(_Unit(f, g, group.num_rows))
                    row_bytes = max(row_bytes, _decoded_bytes(group) / group.num_rows)
        self.rows = sum(u.rows for u in self.units)
        row_bytes = max(row_bytes, 1.0)
        self.chunk_rows = max(1, int(CHUNK_BYTES / row_bytes))
        if shuffle_buffer_size is None:
            shuffle_buffer_size = int(SHUFFLE_BUFFER_BYTES / row_bytes) if shuffle else 0
        self.shuffle_buffer_size = shuffle_buffer_size if shuffle else 0
        self.pool_type = pool_type
        self.num_workers = 1 if pool_type == 'dummy' else num_workers
        self.mp_start_method = mp_start_method
        self._cache = {}  # unit index -> its chunks (inmemory_cache_all)
        self._pool = None
        self._epochs = itertools.count()

    # -- the stream ----------------------------------------------------------------------------
    def epoch(self, total, batch_size):
        """Batches ({column: array}, ``batch_size`` rows, the last one possibly fewer) of
        exactly ``total`` rows: whole passes over the shard, the last one cut short."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError('batch_size must be a positive integer, got {!r}'.format(batch_size))
        rng = np.random.default_rng([self.seed, next(self._epochs)])
        chunks = self._chunks(total, rng)
        if self.shuffle_buffer_size:
            chunks = _shuffled(chunks, self.shuffle_buffer_size, batch_size, rng)
        yield from _batched(chunks, batch_size)

    def _chunks(self, total, rng):
        """Chunks of whole passes over the shard (each in a new unit order when shuffling) until
        ``total`` rows have come; the last chunk may be cut."""
        left = total
        while left > 0:
            order = rng.permutation(len(self.units)) if self.shuffle else np.arange(len(self.units))
            for chunk in self._pass(order.tolist()):
                rows = _rows(chunk)
                if rows >= left:
                    yield chunk if rows == left else {c: a[:left] for c, a in chunk.items()}
                    return
                left -= rows
                yield chunk

    def _pass(self, order):
        """The chunks of the units in ``order``: from the cache when every unit is there, else
        from the readers (caching complete units when ``inmemory_cache_all``)."""
        if self.cache_all and len(self._cache) == len(self.units):
            for i in order:
                yield from self._cache[i]
            return
        if self.pool_type == 'dummy':
            for i in order:
                kept = []
                for chunk in _read_unit(self.fs, self.units[i], self.columns, self.chunk_rows, self.transform):
                    if self.cache_all:
                        kept.append(chunk)
                    yield chunk
                if self.cache_all:
                    self._cache[i] = kept
            return
        yield from self._pooled(order)

    def _pooled(self, order):
        """The chunks of the units in ``order``, as the readers finish them: with several readers,
        chunks of different row groups interleave (num_workers=1 or pool_type='dummy' keep the
        order). At most two chunks per reader wait decoded."""
        pool = self._start_pool()
        generation = pool.begin()
        for seq, i in enumerate(order):
            pool.tasks.put((generation, seq, self.units[i]))
        ended, kept = 0, {}
        try:
            while ended < len(order):
                got, seq, item = pool.results.get()
                if got != generation:
                    continue  # left over from an epoch cut short
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, str):  # _END
                    ended += 1
                    if self.cache_all:
                        self._cache[order[seq]] = kept.pop(seq, [])
                    continue
                if self.cache_all:
                    kept.setdefault(seq, []).append(item)
                yield item
        finally:
            if ended < len(order):
                pool.begin()  # readers drop the rest of this pass

    def _start_pool(self):
        if self._pool is None:
            self._pool = (_ProcessPool if self.pool_type == 'process' else _ThreadPool)(self)
        return self._pool

    def close(self):
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class BatchStream:
    """What a trainer iterates: ``steps`` batches per epoch (each ``iter()``) from ``reader``'s
    epochs of ``total`` rows, the next epoch going on where the last one stopped. ``steps``
    defaults to one whole reader epoch (``ceil(total / batch_size)``); fewer (``train_steps_per_epoch``)
    leave the rest for the next epoch, more go on into the next pass over the shard."""

    def __init__(self, reader, total, batch_size, steps=None):
        self.reader, self.total, self.batch_size = reader, total, batch_size
        self.steps = -(-total // batch_size) if steps is None else max(int(steps), 0)
        self._batches = iter(())

    def __len__(self):
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            batch = next(self._batches, None)
            if batch is None:
                self._batches = self.reader.epoch(self.total, self.batch_size)
                batch = next(self._batches)
            yield batch

    def close(self):
        self._batches = iter(())
        self.reader.close()


class _ThreadPool:
    def __init__(self, reader):
        self.tasks = queue.Queue()
        self.results = queue.Queue(maxsize=2 * reader.num_workers)
        self.generation = 0
        self.closing = False
        args = (reader.fs, reader.columns, reader.chunk_rows, reader.transform, self.tasks, self._put,
                lambda: self.generation)
        self.threads = [threading.Thread(target=_work, args=args, daemon=True, name='hvd-spark-reader')
                        for _ in range(reader.num_workers)]
        for t in self.threads:
            t.start()

    def begin(self):
        """A new pass: what the readers still hold or were given before is dropped."""
        self.generation += 1
        _empty(self.tasks)
        return self.generation

    def _put(self, item):
        while not self.closing:
            try:
                self.results.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self):
        self.closing = True
        self.begin()
        for _ in self.threads:
            self.tasks.put(None)
        for t in self.threads:
            t.join()


class _ProcessPool:
    def __init__(self, reader):
        import multiprocessing

        import cloudpickle
        context = multiprocessing.get_context(reader.mp_start_method or 'spawn')
        self.tasks = context.Queue()
        self.results = context.Queue(maxsize=2 * reader.num_workers)
        self.generation_value = context.Value('q', 0, lock=False)
        transform = cloudpickle.dumps(reader.transform) if reader.transform is not None else None
        self.processes = [context.Process(target=_process_worker, daemon=True, name='hvd-spark-reader',
                                          args=(reader.fs, reader.columns, reader.chunk_rows, transform,
                                                self.tasks, self.results, self.generation_value))
                          for _ in range(reader.num_workers)]
        for p in self.processes:
            p.start()

    def begin(self):
        self.generation_value.value += 1
        _empty(self.tasks)
        return self.generation_value.value

    def close(self):
        for p in self.processes:
            p.terminate()
        for p in self.processes:
            p.join(timeout=5)
        for q in (self.tasks, self.results):
            q.cancel_join_thread()
            q.close()


def _empty(tasks):
    while True:
        try:
            tasks.get_nowait()
        except queue.Empty:
            return


def _decoded_bytes(group):
    """Bytes of a row group once decoded (uncompressed column chunks), an estimate of numpy's."""
    return sum(group.column(i).total_uncompressed_size for i in range(group.num_columns))


def _rows(chunk):
    return len(next(iter(chunk.values())))


def _shuffled(chunks, capacity, batch_size, rng):
    """Chunks out of a shuffling buffer of ``capacity`` rows: once full, each ``batch_size`` rows
    that leave are drawn at random from it; what is left at the end leaves in a random order.
    The buffer is allocated once (grown only for a larger chunk), rows are copied in place."""
    buffer, n = None, 0
    for chunk in chunks:
        rows = _rows(chunk)
        if buffer is None or n + rows > _rows(buffer):
            size = max(capacity + batch_size + rows, 2 * (n + rows) if buffer is not None else 0)
            grown = {c: np.empty((size,) + a.shape[1:], a.dtype) for c, a in chunk.items()}
            for c in grown:
                if buffer is not None:
                    grown[c][:n] = buffer[c][:n]
            buffer = grown
        for c, a in chunk.items():
            buffer[c][n:n + rows] = a
        n += rows
        while n >= capacity + batch_size:
            take = rng.choice(n, batch_size, replace=False)
            yield {c: a[take] for c, a in buffer.items()}
            # Fill the holes below the new end with the rows above it that stay.
            end = n - batch_size
            holes = take[take < end]
            movers = np.setdiff1d(np.arange(end, n), take, assume_unique=True)
            for a in buffer.values():
                a[holes] = a[movers]
            n = end
    if n:
        order = rng.permutation(n)
        yield {c: a[:n][order] for c, a in buffer.items()}


def _batched(chunks, batch_size):
    """Batches of ``batch_size`` rows (the last one possibly fewer) from chunks of any size."""
    pieces, held = [], 0
    for chunk in chunks:
        rows, start = _rows(chunk), 0
        while start < rows:
            take = min(batch_size - held, rows - start)
            pieces.append({c: a[start:start + take] for c, a in chunk.items()})
            held, start = held + take, start + take
            if held == batch_size:
                yield _joined(pieces)
                pieces, held = [], 0
    if held:
        yield _joined(pieces)


def _joined(pieces):
    if len(pieces) == 1:
        return {c: np.ascontiguousarray(a) for c, a in pieces[0].items()}
    return {c: np.concatenate([p[c] for p in pieces]) for c in pieces[0]}
