"""``HorovodEstimator``: what TorchEstimator and KerasEstimator share. ``fit(df)`` materializes
the DataFrame as Parquet in the store (prepare_data) and calls ``fit_on_parquet``, which finds
the run's checkpoint (to resume from) and hands the framework's ``_train`` the paths; training
runs through the backend (``SparkBackend``: horovod.spark.run) unless one is given.

A subclass sets ``_defaults`` (``COMMON_DEFAULTS`` plus its own), ``NOT_AVAILABLE`` ({param:
what a non-default value needs}), ``REQUIRED`` (params that must be set), ``_validate_own``
and ``_train``."""

import time
import warnings

from pyspark.ml import Estimator

from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.params import ParamsMixin
from horovod.spark.common.util import prepare_data

__all__ = ['HorovodEstimator', 'COMMON_DEFAULTS', 'PETASTORM_ONLY']

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

# Parameters that need Petastorm's reader (this build reads Parquet with pyarrow): a non-default
# value raises NotImplementedError naming what it would need.
PETASTORM_ONLY = dict(
    transformation_fn='a Petastorm TransformSpec (this build reads Parquet with pyarrow)',
    transformation_edit_fields='a Petastorm TransformSpec (this build reads Parquet with pyarrow)',
    transformation_removed_fields='a Petastorm TransformSpec (this build reads Parquet with pyarrow)',
    data_module='custom data modules (this build has one reader: pyarrow shards in memory)',
    continuous_cols='categorical/continuous column handling (give feature_cols)',
    categorical_cols='categorical/continuous column handling (give feature_cols)')

# Petastorm reader tuning: meaningless for the in-memory pyarrow reader. A non-default value is
# reported (a warning naming it), never silently dropped.
READER_TUNING = ('train_reader_num_workers', 'val_reader_num_workers', 'reader_pool_type',
                 'shuffle_buffer_size', 'inmemory_cache_all')


class HorovodEstimator(ParamsMixin, Estimator):
    _defaults = COMMON_DEFAULTS
    NOT_AVAILABLE = PETASTORM_ONLY
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
        changed = [n for n in READER_TUNING if s[n] != self._defaults[n]]
        if changed:
            warnings.warn('{}: {} tune the Petastorm reader, which this build does not use (each process '
                          'loads its Parquet shard into memory with pyarrow); they have no effect'.format(
                              name_of_class, ', '.join(changed)))
        for name in self.REQUIRED:
            if s[name] is None:
                raise ValueError('{} needs {}'.format(name_of_class, name))
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

    def _columns(self):
        """The Parquet columns a training process reads: features, labels, sample weight."""
        s = self._settings
        return list(s['feature_cols']) + list(s['label_cols']) + (
            [s['sample_weight_col']] if s['sample_weight_col'] else [])
