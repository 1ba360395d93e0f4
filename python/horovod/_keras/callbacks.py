"""The behaviour of ``hvd.callbacks``, independent of which Keras runs it.

Each class here is a mixin: ``define_callbacks`` combines it with a Keras's ``Callback`` (or
``ModelCheckpoint``) and that Keras's ``KerasBackend`` into the public classes of
``horovod.keras.callbacks`` and ``horovod.tensorflow.keras.callbacks``. Values cross ranks as numpy
through ``numpy_ops``, so the same code runs on TensorFlow, PyTorch and JAX, and on tf-keras.
"""

import sys

import numpy as np

from horovod._keras import numpy_ops
from horovod.common import basics
from horovod.common.ops import Average


def _is_variable(x):
    return hasattr(x, 'assign') and hasattr(x, 'shape') and hasattr(x, 'dtype')


class BroadcastGlobalVariablesCallbackImpl:
    """At the end of the first batch (once): every model variable (minus ``local_variables``)
    and every optimizer variable takes ``root_rank``'s value. The first batch is where the
    optimizer's variables exist for sure; its update is overwritten by root's state, so all
    ranks continue from the same weights."""

    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        if local_variables is None:
            local_variables = []
        elif _is_variable(local_variables):
            local_variables = [local_variables]
        elif isinstance(local_variables, (list, tuple)):
            for v in local_variables:
                if not _is_variable(v):
                    raise ValueError('local_variables must be a variable or a list of variables, '
                                     'got an element of type {}'.format(type(v).__name__))
        else:
            raise ValueError('local_variables must be a variable or a list of variables, got '
                             '{}'.format(type(local_variables).__name__))
        self.local_variables = list(local_variables)
        self.broadcast_done = False

    def _variables(self):
        local = {id(v) for v in self.local_variables}
        model_vars = [v for v in self.model.variables if id(v) not in local]
        optimizer = getattr(self.model, 'optimizer', None)
        opt_vars = self._backend.optimizer_variables(optimizer) if optimizer is not None else []
        return model_vars + [v for v in opt_vars if id(v) not in local]

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        backend = self._backend
        backend.sync_model_state(self.model)
        variables = self._variables()
        names = ['BroadcastGlobalVariablesCallback.{}'.format(i) for i in range(len(variables))]
        values = numpy_ops.broadcast_many(backend.variable_values(variables), self.root_rank,
                                          names)
        backend.assign(variables, values)
        self.broadcast_done = True


class MetricAverageCallbackImpl:
    """At the end of every epoch, replaces each numeric entry of ``logs`` by its average over
    all ranks (keys in sorted order, one grouped call). Put it before callbacks that read
    metrics (checkpointing, early stopping, LR on plateau)."""

    def __init__(self, device=''):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = []
        for k in sorted(logs):
            try:
                float(np.asarray(logs[k]))
            except (TypeError, ValueError):
                continue
            keys.append(k)
        values = [np.asarray(float(np.asarray(logs[k])), dtype=np.float64) for k in keys]
        averaged = numpy_ops.grouped_allreduce(values, op=Average,
                                               name='MetricAverageCallback')
        for k, v in zip(keys, averaged):
            logs[k] = float(v)


class LearningRateScheduleCallbackImpl:
    """lr = initial_lr * multiplier(epoch) for start_epoch <= epoch < end_epoch.

    ``multiplier``: a function of the (possibly fractional) epoch, or a constant m meaning
    ``m ** (epoch - start_epoch)``. ``staircase``: set once at the first batch of each epoch;
    otherwise every batch, with epoch = epoch + batch / steps_per_epoch. Momentum correction
    scales the momentum used for the batch whose lr changed by new_lr / old_lr. ``logs['lr']``
    is set at each epoch end."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError('Parameter `initial_lr` is required')
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self._restore_momentum = None
        if not callable(multiplier):
            self.staircase = True
            constant = multiplier
            self.multiplier = lambda epoch: constant ** (epoch - start_epoch)
        else:
            self.multiplier = multiplier

    def _autodetect_steps_per_epoch(self):
        params = getattr(self, 'params', None) or {}
        if params.get('steps'):
            return params['steps']
        if params.get('samples') and params.get('batch_size'):
            return params['samples'] // params['batch_size']
        raise ValueError('Could not autodetect the number of steps per epoch. Please specify '
                         'the steps_per_epoch parameter to the {}() or upgrade to the latest '
                         'version of Keras.'.format(self.__class__.__name__))

    def _active(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust_learning_rate(self, epoch):
        backend = self._backend
        optimizer = self.model.optimizer
        backend.sync_model_state(self.model)
        old_lr = backend.get_lr(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        backend.set_lr(optimizer, new_lr)
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr:
            self._restore_momentum = backend.scale_momentum(optimizer, new_lr / old_lr)
        return new_lr

    def on_train_begin(self, logs=None):
        if self.steps_per_epoch is None and not self.staircase:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if not self._active(self.current_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust_learning_rate(self.current_epoch)
        else:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        if self._restore_momentum is not None:
            self._backend.sync_model_state(self.model)
            self._restore_momentum()
            self._restore_momentum = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            self._backend.sync_model_state(self.model)
            logs['lr'] = self._backend.get_lr(self.model.optimizer)


class LearningRateWarmupCallbackImpl(LearningRateScheduleCallbackImpl):
    """Gradual warmup over the first ``warmup_epochs``: lr goes from initial_lr / size to
    initial_lr, reaching it at the last batch of the warmup (multiplier
    ``(1/size) * (e * (size - 1) / warmup_epochs + 1)`` with e = epoch + (batch + 1) /
    steps_per_epoch)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

        def multiplier(epoch):
            epoch += 1.0 / self.steps_per_epoch
            size = basics._require_core().size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and basics._require_core().rank() == 0:
            new_lr = self._backend.get_lr(self.model.optimizer)
            print('\nEpoch %d: finished gradual learning rate warmup to %g.' % (epoch + 1, new_lr),
                  file=sys.stdout, flush=True)


class BestModelCheckpointImpl:
    """``ModelCheckpoint(save_best_only=True)`` whose ``filepath`` is set later (Horovod's
    Spark estimators set it); training with it unset raises."""

    _PLACEHOLDER = {True: 'unset.weights.h5', False: 'unset.keras'}

    def __init__(self, monitor='val_loss', verbose=0, save_weights_only=False, mode='auto',
                 save_freq='epoch'):
        super().__init__(filepath=self._PLACEHOLDER[bool(save_weights_only)], monitor=monitor,
                         verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
        self.filepath = None

    def on_train_begin(self, logs=None):
        if self.filepath is None:
            raise ValueError('BestModelCheckpoint has no filepath: set `callback.filepath` '
                             '(e.g. "best.keras") before training.')
        parent = getattr(super(), 'on_train_begin', None)
        if parent is not None:
            parent(logs)


def define_callbacks(keras, backend, module):
    """The public callback classes for one Keras (``keras`` or ``tf.keras``) and its
    ``KerasBackend``, in the order BroadcastGlobalVariablesCallback, MetricAverageCallback,
    LearningRateScheduleCallback, LearningRateWarmupCallback, BestModelCheckpoint. ``module``
    is the public module that exports them (their ``__module__``)."""
    def define(name, impl, base):
        return type(name, (impl, base), {'_backend': backend, '__module__': module,
                                         '__qualname__': name, '__doc__': impl.__doc__})

    callback = keras.callbacks.Callback
    return (define('BroadcastGlobalVariablesCallback', BroadcastGlobalVariablesCallbackImpl,
                   callback),
            define('MetricAverageCallback', MetricAverageCallbackImpl, callback),
            define('LearningRateScheduleCallback', LearningRateScheduleCallbackImpl, callback),
            define('LearningRateWarmupCallback', LearningRateWarmupCallbackImpl, callback),
            define('BestModelCheckpoint', BestModelCheckpointImpl,
                   keras.callbacks.ModelCheckpoint))
