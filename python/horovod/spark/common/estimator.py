"""``HorovodEstimator``: what TorchEstimator and KerasEstimator share. ``fit(df)`` materializes
the DataFrame as Parquet in the store (prepare_data) and calls ``fit_on_parquet``, which finds
the run's checkpoint (to resume from) and hands the framework's ``_train`` the paths; training
runs through the backend (``SparkBackend``: horovod.spark.run) unless one is given.

A subclass sets ``_defaults`` (``COMMON_DEFAULTS`` plus its own), ``NOT_AVAILABLE`` ({param:
what a non-default value needs}), ``REQUIRED`` (params that must be set), ``_validate_own``
and ``_train``."""

import time

from pyspark.ml import Estimator

from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.datamodule import check_tabular_columns
from horovod.spark.common.params import ParamsMixin
from horovod.spark.common.reader import POOL_TYPES, Transform
from horovod.spark.common.serialization import PersistableMixin
from horovod.spark.common.util import prepare_data

__all__ = ['HorovodEstimator', 'COMMON_DEFAULTS']

# Horovod's EstimatorParams: parameter -> default.
COMMON_DEFAULTS = dict(
    num_proc=None, store=None, backend=None, model=None, optimizer=None, loss=None, loss_weights=None,
    sample_weight_col=None, metrics=[], feature_cols=None, label_cols=None, continuous_cols=None,
    categorical_cols=None, validation=None, gradient_compression=None, compress_sparse_cols=False, batch_size=32,
    val_batch_size=None, epochs=1, verbose=1, callbacks=[], random_seed=None, shuffle_buffer_size=None,
    shuffle=True, partitions_per_process=10, run_id=None, train_steps_per_epoch=None,
    validation_steps_per_epoch=None, transformation_fn=None, transformation_edit_fields=None,
    transformation_removed_fields=None, train_reader_num_workers=2, val_reader_num_workers=2,
    reader_pool_type='thread', label_shapes=None, inmemory_cache_all=False, use_gpu=True, mp_start_method=None,
    backward_passes_per_step=1, data_module=None)

class HorovodEstimator(ParamsMixin, PersistableMixin, Estimator):
    _defaults = COMMON_DEFAULTS
    NOT_AVAILABLE = {}  # {param: what a non-default value would need}: refused with NotImplementedError
    REQUIRED = ('store', 'model', 'optimizer', 'feature_cols', 'label_cols')

    def __init__(self, **kwargs):
        super().__init__()
        self._init_settings(kwargs)

    def _validate(self):
        s, name_of_class = self._settings, type(self).__name__
        for name, why in self.NOT_AVAILABLE.items():
            if s[name] not in (None, [], self._defaults[name]):
                raise NotImplementedError('{}({}=...) needs {}, which is not available.'.format(
                    name_of_class, name, why))
        for name in self.REQUIRED:
            if s[name] is None:
                raise ValueError('{} needs {}'.format(name_of_class, name))
        check_tabular_columns(s)
        self._readers()  # raises on bad reader parameters, before any process starts
        self._validate_own()

    def _validate_own(self):
        """Framework-specific checks (raise ValueError / NotImplementedError)."""

    def _fit(self, df):
        self._validate()
        s = self._settings
        with prepare_data(self._backend().num_processes(), s['store'], df, label_columns=s['label_cols'],
                          feature_columns=s['feature_cols'], validation=s['validation'],
                          sample_weight_col=s['sample_weight_col'], compress_sparse=s['compress_sparse_cols'],
                          partitions_per_process=s['partitions_per_process'], verbose=s['verbose']) as idx:
            return self.fit_on_parquet(dataset_idx=idx)

    def fit_on_parquet(self, params=None, dataset_idx=None):
        """Trains on data already in the store (``prepare_data``'s ``dataset_idx``) and returns
        the model transformer. With a ``run_id`` whose checkpoint exists, training resumes
        after the checkpoint's epoch."""
        if params:
            return self.copy(params).fit_on_parquet(dataset_idx=dataset_idx)
        self._validate()
        s = self._settings
        store = s['store']
        train_path = store.get_train_data_path(dataset_idx)
        if not store.is_parquet_dataset(train_path):
            raise ValueError('No training data at {}: prepare it with prepare_data or call fit(df)'.format(train_path))
        val_path = store.get_val_data_path(dataset_idx)
        run_id = s['run_id'] or '{}_{}'.format(self.RUN_PREFIX, int(time.time() * 1000))
        checkpoint_path = store.get_checkpoint_path(run_id)
        resume = None
        if checkpoint_path and store.exists(checkpoint_path):
            with store.open(checkpoint_path, 'rb') as f:
                resume = f.read()
        return self._train(train_path, val_path if store.is_parquet_dataset(val_path) else None, run_id,
                           checkpoint_path, resume)

    def _train(self, train_path, val_path, run_id, checkpoint_path, resume):
        """Runs training on the backend; returns the model transformer. ``val_path`` is None
        without validation data; ``resume`` is the checkpoint's bytes or None."""
        raise NotImplementedError

    def _backend(self):
        s = self._settings
        if s['backend'] is not None:
            if s['num_proc'] is not None:
                raise ValueError('Give num_proc or backend, not both')
            return s['backend']
        return SparkBackend(num_proc=s['num_proc'], verbose=s['verbose'])

    def _transform(self):
        """The ``transformation_fn`` with its fields as the reader applies it, or None."""
        s = self._settings
        if s['transformation_fn'] is None:
            if s['transformation_edit_fields'] or s['transformation_removed_fields']:
                raise ValueError('transformation_edit_fields / transformation_removed_fields describe what '
                                 'transformation_fn changes; they need transformation_fn')
            return None
        if not callable(s['transformation_fn']):
            raise ValueError('transformation_fn must be a function of a pandas DataFrame, got {!r}'.format(
                s['transformation_fn']))
        for field in s['transformation_edit_fields'] or []:
            if not isinstance(field, (tuple, list)) or len(field) != 4:
                raise ValueError('transformation_edit_fields takes (name, numpy dtype, shape, is_nullable) tuples, '
                                 'got {!r}'.format(field))
        transform = Transform(s['transformation_fn'], s['transformation_edit_fields'],
                              s['transformation_removed_fields'])
        removed = [c for c in self._columns() if c not in transform.output_columns(self._columns())]
        if removed:
            raise ValueError('transformation_removed_fields removes {}, which training reads (feature_cols, '
                             'label_cols, sample_weight_col)'.format(removed))
        return transform

    def _reader_options(self, train):
        """ShardReader's keyword arguments for the training (``train``) or validation data."""
        s = self._settings
        workers = s['train_reader_num_workers' if train else 'val_reader_num_workers']
        what = 'train_reader_num_workers' if train else 'val_reader_num_workers'
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError('{} must be a positive integer, got {!r}'.format(what, workers))
        if s['reader_pool_type'] not in POOL_TYPES:
            raise ValueError('reader_pool_type must be one of {}, got {!r}'.format(
                ', '.join(POOL_TYPES), s['reader_pool_type']))
        size = s['shuffle_buffer_size']
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise ValueError('shuffle_buffer_size must be a non-negative integer or None, got {!r}'.format(size))
        return dict(shuffle=bool(s['shuffle']) if train else False, shuffle_buffer_size=size, num_workers=workers,
                    pool_type=s['reader_pool_type'], inmemory_cache_all=bool(s['inmemory_cache_all']),
                    mp_start_method=s['mp_start_method'], transform=self._transform())

    def _readers(self):
        """{'train': ..., 'val': ...}: the reader options the training processes use."""
        return {'train': self._reader_options(train=True), 'val': self._reader_options(train=False)}

    def _columns(self):
        """The Parquet columns a training process reads: features, labels, sample weight."""
        s = self._settings
        return list(s['feature_cols']) + list(s['label_cols']) + (
            [s['sample_weight_col']] if s['sample_weight_col'] else [])
