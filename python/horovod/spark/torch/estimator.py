"""``TorchEstimator``: trains a torch model on a Spark DataFrame with Horovod, as a pyspark.ml
Estimator. ``fit(df)`` materializes the DataFrame as Parquet in the store (prepare_data), runs
training on ``num_proc`` Horovod processes through the backend (horovod.spark.run) and returns
a ``TorchModel`` whose ``transform(df)`` adds the model's outputs as columns."""

import collections
import io
import time
import warnings

import cloudpickle
from pyspark.ml import Estimator

from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.params import ParamsMixin
from horovod.spark.common.util import prepare_data
from horovod.spark.torch.model import TorchModel
from horovod.spark.torch.remote import make_train_fn

__all__ = ['TorchEstimator']

TrainSpec = collections.namedtuple('TrainSpec', [
    'model_bytes', 'optimizer_cls', 'optimizer_defaults', 'optimizer_state', 'losses', 'loss_constructors',
    'loss_weights', 'metrics', 'compression', 'feature_cols', 'label_cols', 'sample_weight_col', 'columns',
    'input_shapes', 'label_shapes', 'store', 'train_path', 'val_path', 'batch_size', 'val_batch_size', 'epochs',
    'train_steps_per_epoch', 'validation_steps_per_epoch', 'shuffle', 'random_seed', 'backward_passes_per_step',
    'checkpoint_path', 'resume_checkpoint', 'verbose'])

# Parameter: default. Spec: EstimatorParams plus TorchEstimator's own.
DEFAULTS = dict(
    num_proc=None, store=None, backend=None, model=None, optimizer=None, loss=None, loss_weights=None,
    sample_weight_col=None, metrics=[], feature_cols=None, label_cols=None, continuous_cols=None,
    categorical_cols=None, validation=None, gradient_compression=None, compress_sparse_cols=False, batch_size=32,
    val_batch_size=None, epochs=1, verbose=1, callbacks=[], random_seed=None, shuffle_buffer_size=None,
    shuffle=True, partitions_per_process=10, run_id=None, train_steps_per_epoch=None,
    validation_steps_per_epoch=None, transformation_fn=None, transformation_edit_fields=None,
    transformation_removed_fields=None, train_reader_num_workers=2, val_reader_num_workers=2,
    reader_pool_type='thread', label_shapes=None, inmemory_cache_all=False, use_gpu=True, mp_start_method=None,
    backward_passes_per_step=1, data_module=None, loss_constructors=None, input_shapes=None,
    train_minibatch_fn=None)

# Accepted only at their defaults: what each non-default value would need.
NOT_AVAILABLE = dict(
    callbacks='training callbacks (TorchEstimator has none in this build)',
    transformation_fn='a Petastorm TransformSpec (this build reads Parquet with pyarrow)',
    transformation_edit_fields='a Petastorm TransformSpec (this build reads Parquet with pyarrow)',
    transformation_removed_fields='a Petastorm TransformSpec (this build reads Parquet with pyarrow)',
    data_module='custom data modules (this build has one reader: pyarrow shards in memory)',
    train_minibatch_fn='custom minibatch functions',
    continuous_cols='categorical/continuous column handling (give feature_cols)',
    categorical_cols='categorical/continuous column handling (give feature_cols)')

# Petastorm reader tuning: meaningless for the in-memory pyarrow reader. A non-default value is
# reported (a warning naming it), never silently dropped.
READER_TUNING = ('train_reader_num_workers', 'val_reader_num_workers', 'reader_pool_type',
                 'shuffle_buffer_size', 'inmemory_cache_all')


class TorchEstimator(ParamsMixin, Estimator):
    """Horovod's TorchEstimator (spec §5). Required: store, model, optimizer (built on
    ``model.parameters()``), loss (callable or list, one per label) or loss_constructors,
    feature_cols, label_cols. Each feature column is one positional input of the model
    (reshaped to ``input_shapes[i]`` when given); each label column pairs with one output.

    Reader: every process loads its shard of the Parquet files into memory (see
    horovod.spark.common.reader), so the Petastorm-specific parameters (reader pool, reader
    workers, shuffle buffer, in-memory cache) have no effect; a non-default value is named in a
    warning. ``use_gpu``: training runs on the CPU in this build. ``metrics``: callables ``metric(output, label) -> number``, averaged over
    the batches into the history (``<name>`` and ``val_<name>``)."""

    _defaults = DEFAULTS

    def __init__(self, **kwargs):
        super().__init__()
        self._init_settings(kwargs)

    def _validate(self):
        s = self._settings
        for name, why in NOT_AVAILABLE.items():
            if s[name] not in (None, [], DEFAULTS[name]):
                raise NotImplementedError('TorchEstimator({}=...) needs {}, which is not available.'.format(name, why))
        changed = [n for n in READER_TUNING if s[n] != DEFAULTS[n]]
        if changed:
            warnings.warn('TorchEstimator: {} tune the Petastorm reader, which this build does not '
                          'use (each process loads its Parquet shard into memory with pyarrow); '
                          'they have no effect'.format(', '.join(changed)))
        if s['loss'] is not None and s['loss_constructors'] is not None:
            raise ValueError('loss and loss_constructors are mutually exclusive')
        if s['backward_passes_per_step'] is None or s['backward_passes_per_step'] <= 0:
            raise ValueError('backward_passes_per_step must be > 0')
        for name in ('store', 'model', 'optimizer', 'feature_cols', 'label_cols'):
            if s[name] is None:
                raise ValueError('TorchEstimator needs {}'.format(name))
        if s['loss'] is None and s['loss_constructors'] is None:
            raise ValueError('TorchEstimator needs loss or loss_constructors')

    def _fit(self, df):
        self._validate()
        s = self._settings
        backend = self._backend()
        with prepare_data(backend.num_processes(), s['store'], df, label_columns=s['label_cols'],
                          feature_columns=s['feature_cols'], validation=s['validation'],
                          sample_weight_col=s['sample_weight_col'], compress_sparse=s['compress_sparse_cols'],
                          partitions_per_process=s['partitions_per_process'], verbose=s['verbose']) as idx:
            return self.fit_on_parquet(dataset_idx=idx)

    def fit_on_parquet(self, params=None, dataset_idx=None):
        """Trains on data already in the store (``prepare_data``'s ``dataset_idx``); returns a
        TorchModel. With a ``run_id`` whose checkpoint exists, training resumes after its epoch."""
        if params:
            return self.copy(params).fit_on_parquet(dataset_idx=dataset_idx)
        self._validate()
        s = self._settings
        store = s['store']
        train_path = store.get_train_data_path(dataset_idx)
        if not store.is_parquet_dataset(train_path):
            raise ValueError('No training data at {}: prepare it with prepare_data or call fit(df)'.format(train_path))
        val_path = store.get_val_data_path(dataset_idx)
        run_id = s['run_id'] or 'torch_{}'.format(int(time.time() * 1000))
        checkpoint_path = store.get_checkpoint_path(run_id)
        resume = None
        if checkpoint_path and store.exists(checkpoint_path):
            with store.open(checkpoint_path, 'rb') as f:
                resume = f.read()
        spec = self._train_spec(store, train_path, val_path if store.is_parquet_dataset(val_path) else None,
                                checkpoint_path, resume)
        results = self._backend().run(make_train_fn(spec), env={})
        trained = results[0]
        import torch
        model = cloudpickle.loads(spec.model_bytes)
        model.load_state_dict(torch.load(io.BytesIO(trained['state_dict'])))
        return TorchModel(model=model, history=trained['history'], feature_cols=list(s['feature_cols']),
                          label_cols=list(s['label_cols']), input_shapes=s['input_shapes'], run_id=run_id)

    def _backend(self):
        s = self._settings
        if s['backend'] is not None:
            if s['num_proc'] is not None:
                raise ValueError('Give num_proc or backend, not both')
            return s['backend']
        return SparkBackend(num_proc=s['num_proc'], verbose=s['verbose'])

    def _train_spec(self, store, train_path, val_path, checkpoint_path, resume):
        s = self._settings
        labels = list(s['label_cols'])
        losses = s['loss'] if isinstance(s['loss'], (list, tuple)) else [s['loss']] * len(labels)
        optimizer = s['optimizer']
        columns = list(s['feature_cols']) + labels + ([s['sample_weight_col']] if s['sample_weight_col'] else [])
        return TrainSpec(
            model_bytes=cloudpickle.dumps(s['model']), optimizer_cls=type(optimizer),
            optimizer_defaults=dict(optimizer.defaults), optimizer_state=optimizer.state_dict(), losses=losses,
            loss_constructors=s['loss_constructors'], loss_weights=s['loss_weights'] or [1.0] * len(labels),
            metrics=list(s['metrics'] or []), compression=s['gradient_compression'],
            feature_cols=list(s['feature_cols']), label_cols=labels, sample_weight_col=s['sample_weight_col'],
            columns=columns, input_shapes=s['input_shapes'] or [None] * len(s['feature_cols']),
            label_shapes=s['label_shapes'] or [None] * len(labels), store=store, train_path=train_path,
            val_path=val_path, batch_size=s['batch_size'], val_batch_size=s['val_batch_size'] or s['batch_size'],
            epochs=s['epochs'], train_steps_per_epoch=s['train_steps_per_epoch'],
            validation_steps_per_epoch=s['validation_steps_per_epoch'], shuffle=s['shuffle'],
            random_seed=s['random_seed'], backward_passes_per_step=s['backward_passes_per_step'],
            checkpoint_path=checkpoint_path, resume_checkpoint=resume, verbose=s['verbose'])
