"""``TorchEstimator``: trains a torch model on a Spark DataFrame with Horovod, as a pyspark.ml
Estimator. ``fit(df)`` materializes the DataFrame as Parquet in the store (prepare_data), runs
training on ``num_proc`` Horovod processes through the backend (horovod.spark.run) and returns
a ``TorchModel`` whose ``transform(df)`` adds the model's outputs as columns."""

import collections
import inspect
import io

import cloudpickle

from horovod.spark.common.estimator import COMMON_DEFAULTS, HorovodEstimator
from horovod.spark.torch.model import TorchModel
from horovod.spark.torch.remote import make_train_fn

__all__ = ['TorchEstimator']

TrainSpec = collections.namedtuple('TrainSpec', [
    'model_bytes', 'optimizer_cls', 'optimizer_defaults', 'optimizer_state', 'losses', 'loss_constructors',
    'loss_weights', 'metrics', 'compression', 'feature_cols', 'label_cols', 'sample_weight_col', 'columns',
    'input_shapes', 'label_shapes', 'store', 'train_path', 'val_path', 'batch_size', 'val_batch_size', 'epochs',
    'train_steps_per_epoch', 'validation_steps_per_epoch', 'shuffle', 'random_seed', 'backward_passes_per_step',
    'checkpoint_path', 'resume_checkpoint', 'verbose', 'readers', 'train_minibatch_fn', 'data_module',
    'continuous_cols', 'categorical_cols', 'transformation_fn', 'callbacks'])

# EstimatorParams plus TorchEstimator's own.
DEFAULTS = dict(COMMON_DEFAULTS, loss_constructors=None, input_shapes=None, train_minibatch_fn=None)

# The hooks a TorchEstimator callback may define (remote._Hooks calls them).
CALLBACK_HOOKS = ('set_model', 'on_train_begin', 'on_epoch_begin', 'on_epoch_end', 'on_train_end')


class TorchEstimator(HorovodEstimator):
    """Horovod's TorchEstimator. Required: store, model, optimizer (built on
    ``model.parameters()``), loss (callable or list, one per label) or loss_constructors,
    feature_cols, label_cols. Each feature column is one positional input of the model
    (reshaped to ``input_shapes[i]`` when given); each label column pairs with one output.

    Reader: every process streams its shard of the Parquet files (horovod.spark.common.reader),
    so the data need not fit in memory; the reader parameters (``train_reader_num_workers``,
    ``val_reader_num_workers``, ``reader_pool_type``, ``shuffle_buffer_size``,
    ``inmemory_cache_all``, ``transformation_fn`` and its fields) work as that module says.
    ``train_minibatch_fn``: one training step, Horovod's signature ``(model, optimizer,
    transform_outputs, loss_fn, inputs, labels, sample_weights) -> (outputs, loss)`` (default:
    zero_grad, forward, loss, backward, step). ``use_gpu``: training runs on the CPU in this build.
    ``data_module``: a DataModule class (horovod.spark.common.datamodule; default
    horovod.spark.torch.datamodule.ShardDataModule) whose ``train_data()`` / ``val_data()``
    batches the loop takes. ``categorical_cols`` / ``continuous_cols``: those feature columns
    reach the model as int64 / float32. ``callbacks``: objects with any of the hooks
    ``set_model(model)``, ``on_train_begin(logs)``, ``on_epoch_begin(epoch, logs)``,
    ``on_epoch_end(epoch, logs)``, ``on_train_end(logs)``, called in every process; one whose
    ``stop_training`` is True ends training after that epoch on every rank (docs/spark.md).
    ``metrics``: callables
    ``metric(output, label) -> number``, averaged over the batches into the history (``<name>``
    and ``val_<name>``)."""

    _defaults = DEFAULTS
    RUN_PREFIX = 'torch'

    def _validate_own(self):
        s = self._settings
        if s['loss'] is not None and s['loss_constructors'] is not None:
            raise ValueError('loss and loss_constructors are mutually exclusive')
        if s['backward_passes_per_step'] is None or s['backward_passes_per_step'] <= 0:
            raise ValueError('backward_passes_per_step must be > 0')
        if s['loss'] is None and s['loss_constructors'] is None:
            raise ValueError('TorchEstimator needs loss or loss_constructors')
        if s['train_minibatch_fn'] is not None and not callable(s['train_minibatch_fn']):
            raise ValueError('train_minibatch_fn must be a function (model, optimizer, transform_outputs, loss_fn, '
                             'inputs, labels, sample_weights) -> (outputs, loss)')
        module = s['data_module']
        if module is not None and not (inspect.isclass(module) and callable(getattr(module, 'train_data', None)) and
                                       callable(getattr(module, 'val_data', None))):
            raise ValueError('TorchEstimator(data_module=...) must be a class with train_data() and val_data() (a '
                             'subclass of horovod.spark.common.datamodule.DataModule), got {!r}'.format(module))
        callbacks = s['callbacks'] or []
        if not isinstance(callbacks, (list, tuple)):
            raise ValueError('TorchEstimator(callbacks=...) must be a list, got {!r}'.format(callbacks))
        for callback in callbacks:
            if not any(callable(getattr(callback, hook, None)) for hook in CALLBACK_HOOKS):
                raise ValueError('TorchEstimator(callbacks=...): {!r} defines none of the hooks {}'.format(
                    callback, ', '.join(CALLBACK_HOOKS)))

    def _train(self, train_path, val_path, run_id, checkpoint_path, resume):
        s = self._settings
        spec = self._train_spec(s['store'], train_path, val_path, checkpoint_path, resume)
        trained = self._backend().run(make_train_fn(spec), env={})[0]
        import torch
        model = cloudpickle.loads(spec.model_bytes)
        model.load_state_dict(torch.load(io.BytesIO(trained['state_dict'])))
        return TorchModel(model=model, history=trained['history'], feature_cols=list(s['feature_cols']),
                          label_cols=list(s['label_cols']), input_shapes=s['input_shapes'], run_id=run_id,
                          categorical_cols=list(s['categorical_cols'] or []) or None)

    def _train_spec(self, store, train_path, val_path, checkpoint_path, resume):
        s = self._settings
        labels = list(s['label_cols'])
        losses = s['loss'] if isinstance(s['loss'], (list, tuple)) else [s['loss']] * len(labels)
        optimizer = s['optimizer']
        return TrainSpec(
            model_bytes=cloudpickle.dumps(s['model']), optimizer_cls=type(optimizer),
            optimizer_defaults=dict(optimizer.defaults), optimizer_state=optimizer.state_dict(), losses=losses,
            loss_constructors=s['loss_constructors'], loss_weights=s['loss_weights'] or [1.0] * len(labels),
            metrics=list(s['metrics'] or []), compression=s['gradient_compression'],
            feature_cols=list(s['feature_cols']), label_cols=labels, sample_weight_col=s['sample_weight_col'],
            columns=self._columns(), input_shapes=s['input_shapes'] or [None] * len(s['feature_cols']),
            label_shapes=s['label_shapes'] or [None] * len(labels), store=store, train_path=train_path,
            val_path=val_path, batch_size=s['batch_size'], val_batch_size=s['val_batch_size'] or s['batch_size'],
            epochs=s['epochs'], train_steps_per_epoch=s['train_steps_per_epoch'],
            validation_steps_per_epoch=s['validation_steps_per_epoch'], shuffle=s['shuffle'],
            random_seed=s['random_seed'], backward_passes_per_step=s['backward_passes_per_step'],
            checkpoint_path=checkpoint_path, resume_checkpoint=resume, verbose=s['verbose'], readers=self._readers(),
            train_minibatch_fn=s['train_minibatch_fn'], data_module=s['data_module'],
            continuous_cols=list(s['continuous_cols'] or []), categorical_cols=list(s['categorical_cols'] or []),
            transformation_fn=s['transformation_fn'], callbacks=cloudpickle.dumps(list(s['callbacks'] or [])))
