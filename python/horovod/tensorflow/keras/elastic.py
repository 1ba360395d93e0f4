"""Elastic training with ``tf.keras``: ``KerasState``, the state callbacks and ``run``."""

import tensorflow as tf

from horovod._keras import elastic as _impl
from horovod._keras.basics import init, shutdown
from horovod.tensorflow.keras import _backend

_Callback = tf.keras.callbacks.Callback


class KerasState(_impl.KerasState):
    """Model and optimizer variables plus keyword attributes, kept in sync for elastic
    training. ``model`` must be built."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        super().__init__(_backend, model, optimizer, **kwargs)


class CommitStateCallback(_impl.CommitStateCallbackImpl, _Callback):
    """Commits the state every ``batches_per_commit`` batches and at each epoch end."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__(state, batches_per_commit)


class UpdateBatchStateCallback(_impl.UpdateBatchStateCallbackImpl, _Callback):
    """Keeps ``state.batch`` current."""

    def __init__(self, state):
        super().__init__(state)


class UpdateEpochStateCallback(_impl.UpdateEpochStateCallbackImpl, _Callback):
    """Keeps ``state.epoch`` current."""

    def __init__(self, state):
        super().__init__(state)


def run(func):
    """Elastic retry loop around ``func(state, ...)`` (see horovod._keras.elastic.run)."""
    return _impl.run(func, _reset)


def _reset():
    shutdown()
    init()
