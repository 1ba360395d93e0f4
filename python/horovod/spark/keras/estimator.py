"""``KerasEstimator``: trains a Keras model on a Spark DataFrame with Horovod, as a pyspark.ml
Estimator. ``fit(df)`` materializes the DataFrame as Parquet in the store (prepare_data), runs
``model.fit`` on ``num_proc`` Horovod processes through the backend (horovod.spark.run) and
returns a ``KerasModel`` whose ``transform(df)`` adds the model's outputs as columns."""

import collections
import inspect

import cloudpickle

from horovod.spark.common.datamodule import tabular_types
from horovod.spark.common.estimator import COMMON_DEFAULTS, HorovodEstimator
from horovod.spark.common.reader import read_first_row
from horovod.spark.keras import util
from horovod.spark.keras.datamodule import custom_module
from horovod.spark.keras.model import KerasModel
from horovod.spark.keras.remote import make_train_fn

__all__ = ['KerasEstimator']

TrainSpec = collections.namedtuple('TrainSpec', [
    'flavour', 'env', 'model_bytes', 'optimizer_config', 'loss', 'loss_weights', 'metrics', 'custom_objects',
    'callbacks', 'checkpoint_callback', 'compression', 'feature_cols', 'label_cols', 'sample_weight_col', 'columns',
    'label_shapes', 'store', 'train_path', 'val_path', 'batch_size', 'val_batch_size', 'epochs',
    'train_steps_per_epoch', 'validation_steps_per_epoch', 'shuffle', 'random_seed', 'backward_passes_per_step',
    'checkpoint_path', 'resume_checkpoint', 'verbose', 'use_gpu', 'readers', 'prefetch', 'continuous_cols',
    'categorical_cols', 'data_module'])

# EstimatorParams plus KerasEstimator's own.
DEFAULTS = dict(COMMON_DEFAULTS, custom_objects=None, checkpoint_callback=None, backend_env=None,
                tensorflow_dataset_prefetch_buffer_size=0)


def _names(values):
    """The strings in a loss given as a name, list or dict."""
    values = values.values() if isinstance(values, dict) else values
    values = values if isinstance(values, (list, tuple)) else [values]
    return [v for v in values if isinstance(v, str)]


class KerasEstimator(HorovodEstimator):
    """Horovod's KerasEstimator. Required: store, model (a Keras 3 or tf-keras
    model, compiled or not), optimizer (a Keras optimizer or its name), loss (a name, a Keras
    loss or a callable; a list or dict for several outputs), feature_cols, label_cols. Each
    feature column is one model input (reshaped to that input's shape); each label column pairs
    with one output (reshaped to ``label_shapes[i]`` when given).

    In every process the model is compiled with ``DistributedOptimizer(optimizer)`` (with
    ``gradient_compression`` and ``backward_passes_per_step``), ``loss``, ``loss_weights`` and
    ``metrics``, and trained by ``model.fit`` with BroadcastGlobalVariablesCallback(0),
    MetricAverageCallback() and then ``callbacks``, so the history holds metrics averaged over
    the ranks. ``checkpoint_callback`` (a ModelCheckpoint, e.g.
    ``horovod.keras.callbacks.BestModelCheckpoint``) runs on rank 0 with its ``filepath`` set
    by the estimator, and the model it saved last is the one returned. ``custom_objects`` is
    used wherever the model, loss or metrics are loaded; ``backend_env`` is added to the
    training processes' environment. Keras 3 runs on the driver's Keras backend
    (KERAS_BACKEND); a tf-keras model trains with TF_USE_LEGACY_KERAS=1.

    Reader: as TorchEstimator (every process streams its Parquet shard, with the reader
    parameters and ``transformation_fn``); ``tensorflow_dataset_prefetch_buffer_size`` > 0 feeds
    ``model.fit`` through a tf.data pipeline that prefetches that many batches (TensorFlow backend
    or tf-keras). ``data_module``: a DataModule class (horovod.spark.common.datamodule) whose
    ``train_data()`` / ``val_data()`` ``model.fit`` trains on instead. ``categorical_cols`` /
    ``continuous_cols`` reach the model as int64 / float32.
    ``use_gpu=False`` hides the GPUs from the training processes (CUDA_VISIBLE_DEVICES=-1);
    with True each process uses the devices Keras finds."""

    _defaults = DEFAULTS
    REQUIRED = HorovodEstimator.REQUIRED + ('loss',)
    RUN_PREFIX = 'keras'

    def _validate_own(self):
        s = self._settings
        keras = util.import_keras(util.flavour_of(s['model']))
        inputs = util.model_inputs(s['model'])
        if inputs is not None and len(inputs) != len(s['feature_cols']):
            raise ValueError('The model has {} inputs but {} feature columns are given ({})'.format(
                len(inputs), len(s['feature_cols']), s['feature_cols']))
        if s['label_shapes'] is not None and len(s['label_shapes']) != len(s['label_cols']):
            raise ValueError('label_shapes has {} entries for {} label columns'.format(
                len(s['label_shapes']), len(s['label_cols'])))
        for loss in _names(s['loss']):
            keras.losses.get(loss)  # ValueError naming an unknown loss, before any process starts
        if s['backward_passes_per_step'] is None or s['backward_passes_per_step'] <= 0:
            raise ValueError('backward_passes_per_step must be > 0')
        prefetch = s['tensorflow_dataset_prefetch_buffer_size']
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError('tensorflow_dataset_prefetch_buffer_size must be a non-negative integer, got {!r}'.format(
                prefetch))
        if prefetch and util.flavour_of(s['model']) != util.TF_KERAS and keras.backend.backend() != 'tensorflow':
            raise ValueError('tensorflow_dataset_prefetch_buffer_size needs tf.data: the TensorFlow backend (this '
                             'Keras runs on {})'.format(keras.backend.backend()))
        module = s['data_module']
        if module is not None and not (inspect.isclass(module) and callable(getattr(module, 'train_data', None)) and
                                       callable(getattr(module, 'val_data', None))):
            raise ValueError('KerasEstimator(data_module=...) must be a class with train_data() and val_data() (a '
                             'subclass of horovod.spark.common.datamodule.DataModule), got {!r}'.format(module))
        callback = s['checkpoint_callback']
        if callback is not None and not hasattr(callback, 'filepath'):
            raise ValueError('checkpoint_callback must be a ModelCheckpoint (it has no filepath), got {}'.format(
                type(callback).__name__))

    def _train(self, train_path, val_path, run_id, checkpoint_path, resume):
        s = self._settings
        if custom_module(s['data_module']) is None:  # a data module makes the model's inputs its own way
            self._check_data(train_path)
        spec = self._train_spec(train_path, val_path, checkpoint_path, resume)
        env = dict(spec.env)
        env.update(s['backend_env'] or {})
        trained = self._backend().run(make_train_fn(spec), env=env)[0]
        keras = util.import_keras(spec.flavour)
        model = util.model_from_bytes(keras, trained['model'], s['custom_objects'])
        return KerasModel(model=model, history=trained['history'], feature_cols=list(s['feature_cols']),
                          label_cols=list(s['label_cols']), custom_objects=s['custom_objects'], run_id=run_id)

    def _check_data(self, train_path):
        """ValueError when a feature column's values per row do not fit its model input (checked
        on the first row, on the driver, before any process starts)."""
        s = self._settings
        row = read_first_row(s['store'], train_path, self._columns(), self._transform())
        if row is None:
            return
        row = tabular_types(row, s['categorical_cols'] or [], s['continuous_cols'] or [])
        shapes = util.input_shapes(s['model'], len(s['feature_cols']))
        for i, (column, shape) in enumerate(zip(s['feature_cols'], shapes)):
            util.reshape(row[column], shape, 'feature column {!r} (model input {})'.format(column, i))

    def _train_spec(self, train_path, val_path, checkpoint_path, resume):
        s = self._settings
        flavour = util.flavour_of(s['model'])
        keras = util.import_keras(flavour)
        labels = list(s['label_cols'])
        optimizer = keras.optimizers.get(s['optimizer'])
        return TrainSpec(
            flavour=flavour, env=util.flavour_env(flavour), model_bytes=util.model_to_bytes(s['model']),
            optimizer_config=keras.optimizers.serialize(optimizer), loss=util.pack_objects(keras, s['loss']),
            loss_weights=s['loss_weights'], metrics=util.pack_objects(keras, list(s['metrics'] or [])),
            custom_objects=cloudpickle.dumps(s['custom_objects'] or {}),
            callbacks=cloudpickle.dumps(list(s['callbacks'] or [])),
            checkpoint_callback=(cloudpickle.dumps(s['checkpoint_callback'])
                                 if s['checkpoint_callback'] is not None else None),
            compression=s['gradient_compression'], feature_cols=list(s['feature_cols']), label_cols=labels,
            sample_weight_col=s['sample_weight_col'], columns=self._columns(),
            label_shapes=s['label_shapes'] or [None] * len(labels), store=s['store'], train_path=train_path,
            val_path=val_path, batch_size=s['batch_size'], val_batch_size=s['val_batch_size'] or s['batch_size'],
            epochs=s['epochs'], train_steps_per_epoch=s['train_steps_per_epoch'],
            validation_steps_per_epoch=s['validation_steps_per_epoch'], shuffle=s['shuffle'],
            random_seed=s['random_seed'], backward_passes_per_step=s['backward_passes_per_step'],
            checkpoint_path=checkpoint_path, resume_checkpoint=resume, verbose=s['verbose'], use_gpu=s['use_gpu'],
            readers=self._readers(), prefetch=s['tensorflow_dataset_prefetch_buffer_size'],
            continuous_cols=list(s['continuous_cols'] or []), categorical_cols=list(s['categorical_cols'] or []),
            data_module=custom_module(s['data_module']))
