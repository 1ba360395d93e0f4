"""``TorchEstimator`` for PyTorch Lightning (Horovod's ``horovod.spark.lightning``): trains a
``LightningModule`` on a Spark DataFrame with Horovod, as a pyspark.ml Estimator, on the same
base and store as the torch and Keras estimators. ``fit(df)`` materializes the DataFrame as
Parquet in the store (prepare_data), runs a Lightning ``Trainer`` (HorovodStrategy) on
``num_proc`` Horovod processes through the backend and returns a ``TorchModel``."""

import collections
import inspect
import io

import cloudpickle
import pytorch_lightning as pl

from horovod.spark.common.estimator import COMMON_DEFAULTS, HorovodEstimator
from horovod.spark.lightning.model import TorchModel
from horovod.spark.lightning.remote import make_train_fn

__all__ = ['TorchEstimator']

TrainSpec = collections.namedtuple('TrainSpec', [
    'model_bytes', 'callbacks_bytes', 'logger', 'compression', 'columns', 'shapes', 'store', 'train_path',
    'val_path', 'batch_size', 'val_batch_size', 'epochs', 'train_steps_per_epoch', 'validation_steps_per_epoch',
    'readers', 'random_seed', 'backward_passes_per_step', 'run_path', 'checkpoint_path', 'logs_path',
    'resume_checkpoint', 'verbose', 'use_gpu', 'log_every_n_steps', 'terminate_on_nan', 'profiler',
    'trainer_args', 'debug_data_loader', 'train_queue_size', 'val_queue_size', 'data_module', 'label_cols',
    'continuous_cols', 'categorical_cols'])

# EstimatorParams plus the Lightning estimator's own (Horovod 0.28.1's names and defaults).
DEFAULTS = dict(COMMON_DEFAULTS, input_shapes=None, loss_constructors=None, train_minibatch_fn=None, num_gpus=None,
                logger=None, log_every_n_steps=50, loader_num_epochs=None, terminate_on_nan=False, profiler=None,
                trainer_args=None, debug_data_loader=False, train_async_data_loader_queue_size=None,
                val_async_data_loader_queue_size=None)

# Accepted only at their defaults: what each non-default value would need.
NOT_AVAILABLE = dict(
    train_minibatch_fn='a custom minibatch function (implement LightningModule.training_step)',
    loader_num_epochs="Petastorm's reader epochs (the streaming reader serves one pass per epoch)")

# Set by LightningModule methods instead: a non-None value is a ValueError saying so.
MODULE_OWNED = dict(optimizer='LightningModule.configure_optimizers', loss='LightningModule.training_step',
                    loss_constructors='LightningModule.training_step', loss_weights='LightningModule.training_step',
                    metrics='self.log(...) in LightningModule.training_step / validation_step')

# Trainer arguments the estimator sets from its own parameters (or that must stay as they are).
TRAINER_OWNED = dict(strategy='(always HorovodStrategy)', accelerator='(CPU in this build)',
                     devices='num_proc (one device per process)', num_nodes='num_proc',
                     max_epochs='epochs', callbacks='callbacks', logger='logger',
                     log_every_n_steps='log_every_n_steps', profiler='profiler',
                     accumulate_grad_batches='backward_passes_per_step',
                     use_distributed_sampler='(each process reads its own shard)')


def _positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class TorchEstimator(HorovodEstimator):
    """Horovod's Lightning TorchEstimator. Required: store, model (a ``LightningModule``),
    feature_cols, label_cols. The module's own ``configure_optimizers``, ``training_step`` and
    ``validation_step`` train it; a batch is a dict {column: tensor} over ``feature_cols``,
    ``label_cols`` (and ``sample_weight_col``), features and labels reshaped to
    ``input_shapes`` / ``label_shapes`` when given. ``optimizer``, ``loss``,
    ``loss_constructors``, ``loss_weights`` and ``metrics`` belong to the module and raise
    ValueError when given.

    Lightning parameters: ``callbacks`` (Lightning callbacks, e.g. EarlyStopping; a
    ModelCheckpoint among them decides which checkpoint is "best"), ``logger`` (a Lightning
    logger, ``False`` for none; default: a CSVLogger whose files go to the run's ``logs`` in the
    store), ``log_every_n_steps``, ``profiler``, ``terminate_on_nan``, ``trainer_args`` (more
    Trainer arguments; those the estimator sets are refused, naming the parameter to use),
    ``data_module`` (a LightningDataModule class constructed with Horovod's arguments in every
    process; default horovod.spark.lightning.datamodule.ShardDataModule).
    See docs/spark.md."""

    _defaults = DEFAULTS
    NOT_AVAILABLE = NOT_AVAILABLE
    REQUIRED = ('store', 'model', 'feature_cols', 'label_cols')
    RUN_PREFIX = 'lightning'

    def _validate_own(self):
        s = self._settings
        if not isinstance(s['model'], pl.LightningModule):
            raise ValueError('TorchEstimator(model=...) must be a pytorch_lightning.LightningModule, got {} (for a '
                             'plain torch.nn.Module use horovod.spark.torch.TorchEstimator)'.format(
                                 type(s['model']).__name__))
        if s['num_gpus'] not in (None, 0):
            raise NotImplementedError('TorchEstimator(num_gpus={!r}) needs GPU training, which is not available: '
                                      'horovod.spark.lightning trains on the CPU in this build (num_gpus=0 or None '
                                      'is accepted)'.format(s['num_gpus']))
        for name, where in MODULE_OWNED.items():
            if s[name] not in (None, []):
                raise ValueError('TorchEstimator({}=...) cannot be given with a LightningModule: use {} '
                                 'instead'.format(name, where))
        for name in ('batch_size', 'epochs', 'backward_passes_per_step', 'log_every_n_steps'):
            if not _positive_int(s[name]):
                raise ValueError('TorchEstimator({}={!r}) must be a positive integer'.format(name, s[name]))
        for name in ('val_batch_size', 'train_async_data_loader_queue_size', 'val_async_data_loader_queue_size'):
            if s[name] is not None and not _positive_int(s[name]):
                raise ValueError('TorchEstimator({}={!r}) must be None or a positive integer'.format(name, s[name]))
        for name in ('train_steps_per_epoch', 'validation_steps_per_epoch'):
            if s[name] is not None and not _positive_int(s[name]):
                raise ValueError('TorchEstimator({}={!r}) must be None or a positive integer'.format(name, s[name]))
        module = s['data_module']
        if module is not None and not (inspect.isclass(module) and issubclass(module, pl.LightningDataModule)):
            raise ValueError('TorchEstimator(data_module=...) must be a pytorch_lightning.LightningDataModule '
                             'subclass (e.g. of horovod.spark.lightning.datamodule.ShardDataModule), got {!r}'.format(
                                 module))
        callbacks = s['callbacks'] or []
        if not isinstance(callbacks, (list, tuple)):
            raise ValueError('TorchEstimator(callbacks=...) must be a list of Lightning callbacks')
        for callback in callbacks:
            if not isinstance(callback, pl.Callback):
                raise ValueError('TorchEstimator(callbacks=...): {!r} is not a pytorch_lightning.Callback'.format(
                    callback))
        logger = s['logger']
        if logger is not None and logger is not False and not isinstance(logger, pl.loggers.Logger):
            raise ValueError('TorchEstimator(logger={!r}) must be a pytorch_lightning logger, False or None'.format(
                logger))
        for name in ('input_shapes', 'label_shapes'):
            columns = s['feature_cols'] if name == 'input_shapes' else s['label_cols']
            if s[name] is not None and len(s[name]) != len(columns):
                raise ValueError('TorchEstimator({}=...) needs one shape per column of {} ({} given for {})'.format(
                    name, 'feature_cols' if name == 'input_shapes' else 'label_cols', len(s[name]), list(columns)))
        args = s['trainer_args'] or {}
        if not isinstance(args, dict):
            raise ValueError('TorchEstimator(trainer_args=...) must be a dict of Trainer arguments')
        accepted = set(inspect.signature(pl.Trainer.__init__).parameters) - {'self'}
        for key in args:
            if key in TRAINER_OWNED:
                raise ValueError('TorchEstimator(trainer_args={{{!r}: ...}}): the estimator sets it; use {}'.format(
                    key, TRAINER_OWNED[key]))
            if key not in accepted:
                raise ValueError('TorchEstimator(trainer_args={{{!r}: ...}}): not an argument of '
                                 'pytorch_lightning.Trainer'.format(key))

    def _train(self, train_path, val_path, run_id, checkpoint_path, resume):
        s = self._settings
        store = s['store']
        spec = TrainSpec(
            model_bytes=cloudpickle.dumps(s['model']), callbacks_bytes=cloudpickle.dumps(list(s['callbacks'] or [])),
            logger=None if s['logger'] is None else cloudpickle.dumps(s['logger']),
            compression=s['gradient_compression'], columns=self._columns(), shapes=self._shapes(), store=store,
            train_path=train_path, val_path=val_path, batch_size=s['batch_size'],
            val_batch_size=s['val_batch_size'] or s['batch_size'], epochs=s['epochs'],
            train_steps_per_epoch=s['train_steps_per_epoch'],
            validation_steps_per_epoch=s['validation_steps_per_epoch'],
            readers=self._readers(), random_seed=s['random_seed'],
            backward_passes_per_step=s['backward_passes_per_step'],
            run_path=store.get_run_path(run_id) if store.save_runs else None, checkpoint_path=checkpoint_path,
            logs_path=store.get_logs_path(run_id), resume_checkpoint=resume, verbose=s['verbose'],
            use_gpu=s['use_gpu'], log_every_n_steps=s['log_every_n_steps'], terminate_on_nan=s['terminate_on_nan'],
            profiler=s['profiler'], trainer_args=dict(s['trainer_args'] or {}),
            debug_data_loader=s['debug_data_loader'], train_queue_size=s['train_async_data_loader_queue_size'],
            val_queue_size=s['val_async_data_loader_queue_size'], data_module=s['data_module'],
            label_cols=list(s['label_cols']), continuous_cols=list(s['continuous_cols'] or []),
            categorical_cols=list(s['categorical_cols'] or []))
        trained = self._backend().run(make_train_fn(spec), env={})[0]
        import torch
        model = cloudpickle.loads(spec.model_bytes)
        model.load_state_dict(torch.load(io.BytesIO(trained['state_dict'])))
        return TorchModel(model=model, history=trained['history'], feature_cols=list(s['feature_cols']),
                          label_cols=list(s['label_cols']), input_shapes=s['input_shapes'], run_id=run_id,
                          categorical_cols=list(s['categorical_cols'] or []) or None,
                          best_model_path=trained['best_model_path'])

    def _shapes(self):
        s = self._settings
        shapes = {}
        for columns, given in ((s['feature_cols'], s['input_shapes']), (s['label_cols'], s['label_shapes'])):
            for column, shape in zip(columns, given or []):
                if shape:
                    shapes[column] = tuple(shape)
        return shapes
