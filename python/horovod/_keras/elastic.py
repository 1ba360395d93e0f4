"""Elastic training for Keras, independent of which Keras runs it: ``KerasState`` and the
callbacks that keep it current during ``model.fit``, and ``run``. ``define_elastic`` binds them to
one Keras (its ``KerasBackend`` and ``Callback`` base) for a public module."""

import functools

from horovod._keras import numpy_ops
from horovod.common import basics
from horovod.common.elastic import ObjectState, names_a_horovod_op, run_fn
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


def _rank():
    return basics._require_core().rank()


class KerasState(ObjectState):
    """State of a Keras training process: the model's and the optimizer's variables (saved in
    host memory on commit, restored on failure, broadcast from rank 0 on sync) plus every
    keyword argument as an attribute (``epoch=0, batch=0``, ...), as ObjectState.

    Args:
        backend: the KerasBackend (bound by the public module).
        model: a built Keras model (else ValueError).
        optimizer: defaults to ``model.optimizer``.
    """

    def __init__(self, backend, model, optimizer=None, **kwargs):
        if not getattr(model, 'built', False):
            raise ValueError('Model must be built first. Run `model.build(input_shape)`.')
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, 'optimizer', None)
        self._keras = backend
        self._saved_model_values = None
        self._saved_optimizer_values = None
        super().__init__(bcast_object=numpy_ops.broadcast_object, get_rank=_rank, **kwargs)
        self._save_variables()

    def _optimizer_variables(self):
        if self.optimizer is None:
            return []
        return self._keras.optimizer_variables(self.optimizer)

    def _save_variables(self):
        self._keras.sync_model_state(self.model)
        self._saved_model_values = self._keras.variable_values(self.model.variables)
        self._saved_optimizer_values = self._keras.variable_values(self._optimizer_variables())

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        self._keras.assign(self.model.variables, self._saved_model_values)
        opt_vars = self._optimizer_variables()
        if len(opt_vars) == len(self._saved_optimizer_values):
            self._keras.assign(opt_vars, self._saved_optimizer_values)
        super().restore()

    def sync(self):
        self._keras.sync_model_state(self.model)
        variables = list(self.model.variables) + self._optimizer_variables()
        names = ['KerasState.{}'.format(i) for i in range(len(variables))]
        values = numpy_ops.broadcast_many(self._keras.variable_values(variables), 0, names)
        self._keras.assign(variables, values)
        self._save_variables()
        super().sync()


class CommitStateCallbackImpl:
    """Commits ``state`` every ``batches_per_commit`` batches and at the end of every epoch."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallbackImpl:
    """Keeps ``state.batch`` at the last finished batch (0 at each epoch end). With
    ``params['steps']`` known, the first epoch after a reset is shortened by the batches
    already done."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        params = getattr(self, 'params', None)
        if params and params.get('steps'):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = params['steps']
            params['steps'] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallbackImpl:
    """At each epoch end, ``state.epoch = state.epoch at train begin + epoch + 1``."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = None

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1


def _failed_collective(error):
    """Whether `error` is, or wraps, a failed Horovod collective."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, HorovodInternalError):
            return True
        if names_a_horovod_op(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def run(func, reset):
    """Elastic retry loop around ``func(state, ...)`` (horovod.common.elastic.run_fn) for Keras:
    a failed collective that surfaces wrapped by the backend (``tf.errors.UnknownError`` naming
    ``HorovodAllreduce`` from a compiled train step, a JAX callback error) counts as a
    ``HorovodInternalError``: restore, reset, retry."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except (HorovodInternalError, HostsUpdatedInterrupt):
            raise
        except Exception as e:
            if _failed_collective(e):
                raise HorovodInternalError(e) from e
            raise

    return run_fn(wrapper, reset)


def _reset():
    basics.shutdown()
    basics.init()


def define_elastic(keras, backend, module):
    """The public elastic API for one Keras (``keras`` or ``tf.keras``) and its
    ``KerasBackend``: (KerasState, CommitStateCallback, UpdateBatchStateCallback,
    UpdateEpochStateCallback, run). ``module`` is the public module that exports them (their
    ``__module__``)."""
    backend_of_module = backend

    class BoundKerasState(KerasState):
        """Model and optimizer variables plus keyword attributes, kept in sync for elastic
        training. ``model`` must be built. ``backend`` is accepted for Horovod's signature and
        ignored: the module's Keras decides."""

        def __init__(self, model, optimizer=None, backend=None, **kwargs):
            super().__init__(backend_of_module, model, optimizer, **kwargs)

    def elastic_run(func):
        """Elastic retry loop around ``func(state, ...)`` (see horovod._keras.elastic.run)."""
        return run(func, _reset)

    def define_callback(name, impl, doc):
        return type(name, (impl, keras.callbacks.Callback),
                    {'__module__': module, '__qualname__': name, '__doc__': doc})

    for public, name in ((BoundKerasState, 'KerasState'), (elastic_run, 'run')):
        public.__module__, public.__name__, public.__qualname__ = module, name, name
    return (BoundKerasState,
            define_callback('CommitStateCallback', CommitStateCallbackImpl,
                            'Commits the state every ``batches_per_commit`` batches and at each '
                            'epoch end.'),
            define_callback('UpdateBatchStateCallback', UpdateBatchStateCallbackImpl,
                            'Keeps ``state.batch`` current.'),
            define_callback('UpdateEpochStateCallback', UpdateEpochStateCallbackImpl,
                            'Keeps ``state.epoch`` current.'),
            elastic_run)
