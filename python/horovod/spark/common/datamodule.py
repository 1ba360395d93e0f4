"""``DataModule``: Horovod's base class for the data modules of the torch and Keras estimators
(``data_module=<class>``). The estimator constructs the class in every training process with
keyword arguments (the base keeps them as attributes of the same names), enters it as a context
manager around training, and trains on ``train_data()`` / ``val_data()``:

* ``train_dir``, ``val_dir``: the store paths of the Parquet data prepare_data wrote;
  ``has_val``: whether there is validation data.
* ``cur_shard``, ``shard_count``: this process's rank and the number of processes (read the
  ``cur_shard``-th of every ``shard_count`` files, as ``shard_reader`` does).
* ``num_train_epochs``, ``train_batch_size``, ``val_batch_size``, ``shuffle``,
  ``steps_per_epoch_train``, ``steps_per_epoch_val`` (the batches the estimator takes from the
  data per epoch: the same on every rank), ``schema_fields`` (the columns training reads),
  ``transform_fn``, ``inmemory_cache_all``, ``storage_options``, ``verbose``.
* Horovod's others, passed to every data module: ``label_cols``, ``continuous_cols``,
  ``categorical_cols``, ``random_seed``, ``reader_pool_type``, ``train_reader_worker_count``,
  ``val_reader_worker_count``; and this build's ``store`` (the Store) and ``reader_options``
  ({'train': ..., 'val': ...}: the ShardReader options the estimator's reader parameters make).
  They arrive in ``**kwargs`` and are kept as attributes too.

A subclass implements ``train_data()`` and ``val_data()``, each returning what the framework's
loop iterates (see docs/spark.md for what each estimator takes), and may open and close its
readers in ``__enter__`` / ``__exit__``."""

import math
from abc import ABC, abstractmethod

import numpy as np

__all__ = ['DataModule', 'NVTabularDataModule', 'TypedStream', 'construct', 'tabular_types',
           'check_tabular_columns', 'steps_per_epoch']


class DataModule(ABC):
    """Context manager base class of the data modules (module docstring)."""
    short_name = None  # a short name for the implementation, as Horovod's 'petastorm' / 'nvtabular'

    def __init__(self, train_dir, val_dir, num_train_epochs=1, has_val=True, train_batch_size=32, val_batch_size=32,
                 shuffle=True, transform_fn=None, inmemory_cache_all=False, cur_shard=0, shard_count=1,
                 schema_fields=None, storage_options=None, steps_per_epoch_train=1, steps_per_epoch_val=1,
                 verbose=True, **kwargs):
        super().__init__()
        self.train_dir, self.val_dir = train_dir, val_dir
        self.num_train_epochs, self.has_val = num_train_epochs, has_val
        self.train_batch_size, self.val_batch_size, self.shuffle = train_batch_size, val_batch_size, shuffle
        self.transform_fn, self.inmemory_cache_all = transform_fn, inmemory_cache_all
        self.cur_shard, self.shard_count = cur_shard, shard_count
        self.schema_fields, self.storage_options = schema_fields, storage_options
        self.steps_per_epoch_train, self.steps_per_epoch_val = steps_per_epoch_train, steps_per_epoch_val
        self.verbose = verbose
        self.store = kwargs.get('store')
        self.reader_options = kwargs.get('reader_options') or {}
        self.label_cols = kwargs.get('label_cols')
        self.continuous_cols = kwargs.get('continuous_cols') or []
        self.categorical_cols = kwargs.get('categorical_cols') or []
        self.random_seed = kwargs.get('random_seed')
        self.kwargs = kwargs

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        return None

    @abstractmethod
    def train_data(self):
        """The training data, in the form the estimator's loop takes."""

    @abstractmethod
    def val_data(self):
        """The validation data, in the form the estimator's loop takes (None without any)."""

    def shard_reader(self, train=True):
        """A horovod.spark.common.reader.ShardReader over this process's shard of the training
        (``train``) or validation data, reading ``schema_fields`` with the estimator's reader
        options. The caller closes it (``close()`` or ``with``)."""
        from horovod.spark.common.reader import ShardReader
        if self.store is None:
            raise ValueError('{}.shard_reader() needs the store (the estimator passes store=...)'.format(
                type(self).__name__))
        options = dict(self.reader_options.get('train' if train else 'val') or {})
        seed = (self.random_seed or 0) + 1000 * self.cur_shard
        return ShardReader(self.store, self.train_dir if train else self.val_dir, self.schema_fields, self.cur_shard,
                           self.shard_count, seed=seed, **options)


class NVTabularDataModule(DataModule):
    """Horovod's NVTabular data module (GPU-accelerated tabular loading). Refused: NVTabular
    needs a CUDA GPU and RAPIDS (cudf), which this build does not use. The default data module
    types ``categorical_cols`` / ``continuous_cols`` as NVTabular's loaders did."""
    short_name = 'nvtabular'

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            'NVTabularDataModule needs NVTabular, which needs a CUDA GPU and RAPIDS (cudf): not available in this '
            'build. Leave data_module unset and give categorical_cols / continuous_cols: the default data module '
            'gives those columns as int64 / float32, as NVTabular did')

    def train_data(self):
        raise NotImplementedError

    def val_data(self):
        raise NotImplementedError


def tabular_types(batch, categorical_cols, continuous_cols):
    """``batch`` ({column: numpy array}) with every categorical column as int64 and every
    continuous column as float32 (the types Horovod's NVTabular loaders give them): category ids
    for embeddings, numbers for dense layers. A categorical value that is not a whole number is a
    ValueError naming the column."""
    if not categorical_cols and not continuous_cols:
        return batch
    out = dict(batch)
    for column in categorical_cols:
        values = np.asarray(out[column])
        if values.dtype.kind == 'f':
            if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
                bad = values[~np.isfinite(values) | (values != np.round(values))].reshape(-1)[:3].tolist()
                raise ValueError('categorical_cols: column {!r} holds values that are not category ids (whole '
                                 'numbers), e.g. {}'.format(column, bad))
        elif values.dtype.kind not in 'iub':
            raise ValueError('categorical_cols: column {!r} has {} values, not category ids'.format(
                column, values.dtype))
        out[column] = values.astype(np.int64, copy=False)
    for column in continuous_cols:
        values = np.asarray(out[column])
        if values.dtype.kind not in 'iubf':
            raise ValueError('continuous_cols: column {!r} has {} values, not numbers'.format(column, values.dtype))
        out[column] = values.astype(np.float32, copy=False)
    return out


def check_tabular_columns(settings):
    """ValueError unless ``continuous_cols`` / ``categorical_cols`` are lists of distinct
    feature columns (they say how feature columns are typed)."""
    features = list(settings['feature_cols'] or [])
    seen = {}
    for name in ('continuous_cols', 'categorical_cols'):
        columns = settings[name]
        if columns is None:
            continue
        if isinstance(columns, str) or not isinstance(columns, (list, tuple)):
            raise ValueError('{} must be a list of column names, got {!r}'.format(name, columns))
        unknown = [c for c in columns if c not in features]
        if unknown:
            raise ValueError('{} names {}, which are not in feature_cols {}: they describe feature columns'.format(
                name, unknown, features))
        for column in columns:
            if column in seen:
                raise ValueError('column {!r} is in both {} and {}'.format(column, seen[column], name))
            seen[column] = name


def steps_per_epoch(shard_rows, batch_size, given, what):
    """Batches per epoch, the same on every rank: ``given`` (train_steps_per_epoch /
    validation_steps_per_epoch) or one pass of the largest shard (``shard_rows``: every rank's
    row count, in rank order; see reader.epoch_rows)."""
    from horovod.spark.common.reader import epoch_rows
    total = epoch_rows(shard_rows, what)
    return int(given) if given is not None else int(math.ceil(total / batch_size))


class TypedStream:
    """A reader.BatchStream whose batches go through ``tabular_types`` (same length, same
    epochs): how the data modules apply ``categorical_cols`` / ``continuous_cols``."""

    def __init__(self, stream, categorical_cols, continuous_cols):
        self.stream, self.categorical_cols, self.continuous_cols = stream, categorical_cols, continuous_cols

    def __len__(self):
        return len(self.stream)

    def __iter__(self):
        for batch in self.stream:
            yield tabular_types(batch, self.categorical_cols, self.continuous_cols)

    def close(self):
        self.stream.close()


def construct(data_module, arguments, extras):
    """``data_module(**arguments, **extras)``, the ``extras`` (this build's additions to
    Horovod's arguments) limited to those its constructor takes, so that a data module written
    for Horovod's arguments alone works."""
    import inspect
    parameters = inspect.signature(data_module.__init__).parameters.values()
    if not any(p.kind == p.VAR_KEYWORD for p in parameters):
        names = {p.name for p in parameters}
        extras = {k: v for k, v in extras.items() if k in names}
    return data_module(**arguments, **extras)
