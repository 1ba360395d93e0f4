"""Elastic training for TensorFlow: ``hvd.elastic.run``, ``TensorFlowKerasState`` and
``TensorFlowState`` (the framework-neutral parts live in ``horovod.common.elastic``).

State classes keep a copy of the variables in host memory on ``save()`` (``commit()``), put it
back on ``restore()`` after a failed collective, and broadcast rank 0's variables on ``sync()``.
"""

import functools

import tensorflow as tf

from horovod.common.elastic import ObjectState, names_a_horovod_op, run_fn
from horovod.common.error_feedback import ErrorFeedbackCompressor
from horovod.common.exceptions import HorovodInternalError
from horovod.tensorflow.functions import broadcast_object, broadcast_variables
from horovod.tensorflow.mpi_ops import init, rank, shutdown


def run(func):
    """Decorator for elastic training: ``func(state, *args, **kwargs)`` is retried after a failed
    collective (state restored to the last commit, Horovod re-initialized, state synced from rank
    0) and after host changes (re-initialized without rollback).

    As in Horovod, a ``tf.errors.UnknownError`` whose message names a Horovod op (how a failed
    collective inside a graph surfaces) counts as a ``HorovodInternalError``; any other
    ``UnknownError`` is swallowed and the call returns None."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except HorovodInternalError:
            raise
        except tf.errors.UnknownError as e:
            if names_a_horovod_op(e):
                raise HorovodInternalError(e) from e
            return None

    return run_fn(wrapper, _reset)


def _reset():
    shutdown()
    init()


def _variables_of(obj):
    """``obj.variables`` as a list (a property in Keras 3 and new tf-keras optimizers, a method
    in legacy ones)."""
    variables = obj.variables
    return list(variables() if callable(variables) else variables)


def _values(variables):
    return [tf.identity(tf.convert_to_tensor(v)).numpy() for v in variables]


def _assign(variables, values):
    for var, value in zip(variables, values):
        var.assign(value)


class _CompressorStates:
    """The state of the error-feedback compressors given to a state object as keyword
    arguments (eager only): saved and restored with the model; on sync the parts every rank
    must agree on (PowerSGD's Q and step) come from rank 0, and the residuals (each rank's own
    error) stay."""

    def __init__(self, kwargs):
        self.compressors = {k: v for k, v in kwargs.items()
                            if isinstance(v, ErrorFeedbackCompressor)}
        if self.compressors and not tf.executing_eagerly():
            raise ValueError('Elastic state of compressors ({}) needs eager execution'
                             .format(', '.join(sorted(self.compressors))))
        self._saved = {}
        self.save()

    def without(self, kwargs):
        return {k: v for k, v in kwargs.items() if k not in self.compressors}

    def save(self):
        self._saved = {name: [(pos, slot_name, slot.numpy())
                              for pos, slot_name, slot in c.positioned_items()]
                       for name, c in self.compressors.items()}

    def restore(self):
        for name, c in self.compressors.items():
            saved = {(pos, n): value for pos, n, value in self._saved[name]}
            for pos, slot_name, slot in c.positioned_items():
                value = saved.get((pos, slot_name))
                # Slots created after the commit go back to where they started: zero residual.
                if value is not None:
                    slot.assign(value)
                elif slot_name in c.local_slot_names():
                    slot.assign(tf.zeros_like(slot))

    def sync(self):
        for name, c in sorted(self.compressors.items()):
            local = c.local_slot_names()
            shared = {(pos, n): slot.numpy() for pos, n, slot in c.positioned_items()
                      if n not in local}
            shared = broadcast_object(shared, root_rank=0,
                                      name='horovod_compression_state_' + name)
            mine = {(pos, n): slot for pos, n, slot in c.positioned_items()}
            for k, value in shared.items():
                if k in mine:
                    mine[k].assign(value)
            c.set_pending({k: v for k, v in shared.items() if k not in mine})
        self.save()


class TensorFlowKerasState(ObjectState):
    """Elastic state of a Keras model and its optimizer, plus plain Python values (``kwargs``,
    as ``ObjectState``). The model must be built. ``backend``: a tf-keras backend for TF1 graph
    mode (its session runs the broadcast); None in eager code. A keyword argument that is an
    error-feedback compressor (``hvd.PowerSGD``, ``hvd.Int8Quantizer``) has its state committed
    and restored with the model (eager only)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, 'built', False):
            raise ValueError('Model must be built first. Run `model.build(input_shape)`.')
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, 'optimizer', None)
        self.backend = backend
        self._save_model()
        self._compressors = _CompressorStates(kwargs)
        super().__init__(bcast_object=broadcast_object, get_rank=rank,
                         **self._compressors.without(kwargs))

    def _optimizer_variables(self):
        return [] if self.optimizer is None else _variables_of(self.optimizer)

    def _save_model(self):
        self._saved_model_state = _values(self.model.variables)
        self._saved_optimizer_state = _values(self._optimizer_variables())

    def _load_model(self):
        _assign(self.model.variables, self._saved_model_state)
        opt_vars = self._optimizer_variables()
        # Optimizer variables created after the last save (first step) have nothing to restore.
        if len(opt_vars) == len(self._saved_optimizer_state):
            _assign(opt_vars, self._saved_optimizer_state)

    def save(self):
        self._save_model()
        self._compressors.save()
        super().save()

    def restore(self):
        self._load_model()
        self._compressors.restore()
        super().restore()

    def sync(self):
        variables = list(self.model.variables) + self._optimizer_variables()
        op = broadcast_variables(variables, root_rank=0)
        if op is not None and self.backend is not None:
            self.backend.get_session().run(op)
        self._save_model()
        self._compressors.sync()
        super().sync()


class TensorFlowState(ObjectState):
    """Elastic state of TensorFlow variables (default: every global variable of the graph),
    plus plain Python values. In a TF1 graph, ``session`` runs the ops (default: the default
    session). Error-feedback compressors given as keyword arguments: as
    ``TensorFlowKerasState``."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = list(variables) if variables is not None else \
            tf.compat.v1.global_variables()
        self.session = session
        self._eager = tf.executing_eagerly()
        if not self._eager:
            self._placeholders = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                                  for v in self.variables]
            self._assign_op = tf.group(*[v.assign(p) for v, p in
                                         zip(self.variables, self._placeholders)])
            self._bcast_op = broadcast_variables(self.variables, root_rank=0)
        self._saved = None
        self._save_variables()
        self._compressors = _CompressorStates(kwargs)
        super().__init__(bcast_object=broadcast_object, get_rank=rank,
                         **self._compressors.without(kwargs))

    def _session(self):
        return self.session or tf.compat.v1.get_default_session()

    def _save_variables(self):
        if self._eager:
            self._saved = _values(self.variables)
        else:
            self._saved = self._session().run(self.variables)

    def _load_variables(self):
        if self._eager:
            _assign(self.variables, self._saved)
        else:
            self._session().run(self._assign_op,
                                feed_dict=dict(zip(self._placeholders, self._saved)))

    def save(self):
        self._save_variables()
        self._compressors.save()
        super().save()

    def restore(self):
        self._load_variables()
        self._compressors.restore()
        super().restore()

    def sync(self):
        if self._eager:
            broadcast_variables(self.variables, root_rank=0)
        else:
            self._session().run(self._bcast_op)
        self._save_variables()
        self._compressors.sync()
        super().sync()
