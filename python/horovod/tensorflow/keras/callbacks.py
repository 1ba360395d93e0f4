"""Keras callbacks for Horovod training with ``tf.keras`` (see ``horovod._keras.callbacks``
for what each does)."""

import tensorflow as tf

from horovod._keras import callbacks as _impl
from horovod.tensorflow.keras import _backend

_keras = tf.keras


class BroadcastGlobalVariablesCallback(_impl.BroadcastGlobalVariablesCallbackImpl,
                                       _keras.callbacks.Callback):
    """Broadcasts model and optimizer variables from ``root_rank`` at the end of the first
    batch, so every rank starts from the same state."""
    _backend = _backend

    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__(root_rank, device, local_variables)


class MetricAverageCallback(_impl.MetricAverageCallbackImpl, _keras.callbacks.Callback):
    """Averages the epoch's metrics (``logs``) over all ranks at each epoch end."""
    _backend = _backend

    def __init__(self, device=''):
        super().__init__(device)


class LearningRateScheduleCallback(_impl.LearningRateScheduleCallbackImpl,
                                   _keras.callbacks.Callback):
    """Sets lr = initial_lr * multiplier(epoch) between start_epoch and end_epoch."""
    _backend = _backend

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__(initial_lr, multiplier, start_epoch, end_epoch, staircase,
                         momentum_correction, steps_per_epoch)


class LearningRateWarmupCallback(_impl.LearningRateWarmupCallbackImpl,
                                 _keras.callbacks.Callback):
    """Raises lr from initial_lr / size to initial_lr over the first warmup_epochs."""
    _backend = _backend

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        super().__init__(initial_lr, warmup_epochs, momentum_correction, steps_per_epoch,
                         verbose)


class BestModelCheckpoint(_impl.BestModelCheckpointImpl, _keras.callbacks.ModelCheckpoint):
    """ModelCheckpoint keeping only the best model; set ``filepath`` before training."""
    _backend = _backend

    def __init__(self, monitor='val_loss', verbose=0, save_weights_only=False, mode='auto',
                 save_freq='epoch'):
        super().__init__(monitor=monitor, verbose=verbose, save_weights_only=save_weights_only,
                         mode=mode, save_freq=save_freq)
