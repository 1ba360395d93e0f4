"""Reading a materialized Parquet dataset in a training process: each rank takes every
``size``-th file (Spark writes one per partition, ``partitions_per_process`` per process), so
the ranks read disjoint shards with pyarrow alone. The shard is loaded into memory as numpy
arrays; the framework module wraps them (torch: a TensorDataset and a DataLoader).

Why not Petastorm (what Horovod used): it is barely maintained and pins old pyarrow; a plain
pyarrow reader needs nothing beyond what Spark's Parquet output already is."""

import numpy as np
import pyarrow.parquet as pq

__all__ = ['read_shard', 'read_first_row', 'epoch_rows', 'epoch_order']


def read_shard(store, path, columns, rank, size):
    """{column: numpy array} of rank ``rank``'s shard of the dataset at ``path``. Array columns
    become 2-D arrays (rows x elements); integral columns stay integral (labels), the rest
    float32. A rank whose shard is empty (fewer files than ranks) reads the whole dataset's
    first file, so that every rank has batches to step with."""
    files = store.parquet_files(path)
    if not files:
        raise ValueError('No Parquet files under {}: was the data prepared (prepare_data / fit)?'.format(path))
    mine = files[rank::size] or files[:1]
    return _to_arrays([pq.read_table(f, columns=columns, filesystem=store.fs) for f in mine], columns)


def read_first_row(store, path, columns):
    """{column: numpy array of one row} of the dataset at ``path`` (the first row of its first
    non-empty file), as read_shard converts them; None when the dataset has no rows. Lets the
    driver check the data against the model before any process starts."""
    for f in store.parquet_files(path):
        table = pq.read_table(f, columns=columns, filesystem=store.fs)
        if table.num_rows:
            return _to_arrays([table.slice(0, 1)], columns)
    return None


def epoch_rows(shard_rows, what):
    """How many rows every rank goes through per epoch, given each rank's shard size
    (``shard_rows``, in rank order): the largest shard's. Every rank must take the same number
    of steps (each training step is a collective), and with the largest count every row of
    every shard is used each epoch; smaller shards wrap around (see epoch_order). ValueError
    naming the ranks whose ``what`` shard has no rows."""
    empty = [rank for rank, n in enumerate(shard_rows) if n == 0]
    if empty:
        raise ValueError('The {} data of ranks {} is empty (its Parquet files have no rows): use fewer processes, '
                         'more rows, or more partitions_per_process'.format(what, empty))
    return max(shard_rows)


def epoch_order(rows, total, permute=None):
    """The row indices of one epoch of ``total`` rows over a shard of ``rows`` rows: whole passes
    over the shard, each in a new order ``permute(rows)`` (in row order without ``permute``),
    cut at ``total``. With ``total >= rows`` every row comes at least once."""
    passes, covered = [], 0
    while covered < total:
        passes.append(np.asarray(permute(rows)) if permute is not None else np.arange(rows))
        covered += rows
    return np.concatenate(passes)[:total] if passes else np.arange(0)


def _to_arrays(tables, columns):
    arrays = {}
    for column in columns:
        chunks = [t.column(column).to_pylist() for t in tables]
        values = [v for chunk in chunks for v in chunk]
        array = np.asarray(values)
        if array.dtype.kind == 'f' or array.dtype.kind == 'O':
            array = array.astype(np.float32)
        elif array.dtype.kind == 'b':
            array = array.astype(np.float32)
        arrays[column] = array
    return arrays
