"""DistributedOptimizer for ``horovod.tensorflow``.

A legacy ``tf.compat.v1.train.Optimizer`` is wrapped here: ``compute_gradients`` reduces the
gradients across the process set (grouped, see ``horovod.tensorflow.gradients``) and
``apply_gradients``, ``get_slot``, ``get_slot_names`` and ``variables`` delegate to the wrapped
optimizer, so ``minimize`` works in TF1 graphs and eagerly. With ``op=Adasum`` the wrapper is a
delta optimizer: each rank applies its own gradients, and the weight deltas are combined with
Adasum. A Keras optimizer is handed to ``horovod.tensorflow.keras.DistributedOptimizer``.
"""

import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow import collectives as _collectives
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper
from horovod.tensorflow.gradients import (_make_allreduce_grads_fn, check_reduction_args,
                                          scale_local_gradients)
from horovod.tensorflow.mpi_ops import Adasum, Average
from horovod.tensorflow.util import var_ref


class _LocalVars:
    """Variables registered with ``register_local_var``: their gradients are not reduced."""

    def __init__(self, allreduce_grads, process_set, scale):
        self._refs = set()
        self._allreduce_grads = allreduce_grads
        self._process_set = process_set
        self._scale = scale

    def add(self, var):
        self._refs.add(var_ref(var))

    def reduce(self, grads, vars, use_generic_names=False):
        """Reduces the gradients of non-local variables; local ones are kept (scaled)."""
        grads, vars = list(grads), list(vars)
        is_local = [var_ref(v) in self._refs for v in vars] if self._refs else [False] * len(vars)
        idx = [i for i, loc in enumerate(is_local) if not loc]
        reduced = self._allreduce_grads([grads[i] for i in idx], [vars[i] for i in idx],
                                        use_generic_names)
        out = list(grads)
        for i, g in zip(idx, reduced):
            out[i] = g
        local_idx = [i for i, loc in enumerate(is_local) if loc]
        if local_idx and self._scale:
            scaled = scale_local_gradients([grads[i] for i in local_idx], self._process_set)
            for i, g in zip(local_idx, scaled):
                out[i] = g
        return out


class _WrapsOptimizer(tf.compat.v1.train.Optimizer):
    """A legacy optimizer around another (``self._optimizer``), whose slots and variables are
    the wrapped one's."""

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


class _DistributedOptimizer(_WrapsOptimizer):
    """A legacy optimizer whose ``compute_gradients`` returns reduced gradients."""

    def __init__(self, optimizer, name=None, use_locking=False, device_dense='', device_sparse='',
                 compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, backward_passes_per_step=1,
                 average_aggregated_gradients=False, groups=None,
                 process_set=global_process_set, scale_local_gradients=True):
        if name is None:
            name = 'Distributed{}'.format(type(optimizer).__name__)
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        allreduce_grads = _make_allreduce_grads_fn(
            name, device_dense, device_sparse, compression, sparse_as_dense, op,
            gradient_predivide_factor, groups, process_set)
        self._local_vars = _LocalVars(allreduce_grads, process_set, scale_local_gradients)
        self._agg_helper = None
        if backward_passes_per_step > 1:
            if tf.executing_eagerly():
                raise ValueError('backward_passes_per_step > 1 is not supported for a legacy '
                                 'tf.compat.v1.train.Optimizer in eager mode: use a Keras '
                                 'optimizer (hvd.DistributedOptimizer on a keras optimizer) or '
                                 'a TF1 graph.')
            self._agg_helper = LocalGradientAggregationHelper(
                backward_passes_per_step, self._local_vars.reduce, sparse_as_dense,
                average_aggregated_gradients, process_set)

    def register_local_var(self, var):
        """Keeps ``var``'s gradient local to this rank (not reduced)."""
        self._local_vars.add(var)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's ``compute_gradients``, with every gradient reduced across the
        process set (or aggregated locally first, with ``backward_passes_per_step``)."""
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        if not gradients:
            return gradients
        grads, vars = zip(*gradients)
        if self._agg_helper is not None:
            reduced = self._agg_helper.compute_gradients(grads, vars)
        else:
            reduced = self._local_vars.reduce(grads, vars)
        return list(zip(reduced, vars))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        if self._agg_helper is not None:
            return self._agg_helper.apply_gradients(
                lambda: self._optimizer.apply_gradients(grads_and_vars, global_step, name),
                grads_and_vars, global_step)
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                               name=name)


class _DistributedAdasumOptimizer(_WrapsOptimizer):
    """Adasum delta optimizer: gradients stay local, each rank applies them with the wrapped
    optimizer, and the change of the weights is combined across ranks with Adasum (weights =
    start + Adasum(deltas)). With ``backward_passes_per_step`` N > 1 (as in Horovod) every step
    is applied locally and every N-th one combines the change since the last combination
    (eagerly only in this build)."""

    def __init__(self, optimizer, name=None, use_locking=False, compression=Compression.none,
                 process_set=global_process_set, backward_passes_per_step=1):
        if name is None:
            name = 'DistributedDelta{}'.format(type(optimizer).__name__)
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._compression = compression
        self._process_set = process_set
        self._passes = backward_passes_per_step
        self._steps = 0
        self._starts = {}  # variable ref -> the variable's value at the last combination

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    def _apply_several_passes(self, grads_and_vars, global_step, name):
        if not tf.executing_eagerly():
            raise NotImplementedError('The Adasum delta optimizer of this build combines every '
                                      'backward_passes_per_step steps only eagerly; in a TF1 '
                                      'graph use backward_passes_per_step=1 with op=Adasum.')
        variables = [v for g, v in grads_and_vars if g is not None]
        for v in variables:
            if var_ref(v) not in self._starts:
                self._starts[var_ref(v)] = tf.Variable(v.read_value(), trainable=False)
        self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        self._steps += 1
        if self._steps % self._passes:
            return None
        starts = [self._starts[var_ref(v)] for v in variables]
        deltas = [v.read_value() - s.read_value() for v, s in zip(variables, starts)]
        with tf.name_scope(self._name + '_Allreduce'):
            combined = _collectives.grouped_allreduce(deltas, op=Adasum,
                                                      compression=self._compression,
                                                      process_set=self._process_set)
        for v, s, d in zip(variables, starts, combined):
            s.assign_add(d)
            v.assign(s.read_value())
        return None

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        if self._passes > 1:
            return self._apply_several_passes(grads_and_vars, global_step, name)
        variables = [v for g, v in grads_and_vars if g is not None]
        start = [tf.identity(v.read_value()) for v in variables]
        with tf.control_dependencies(start):
            apply = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                    name=name)
        with tf.control_dependencies([apply]):
            deltas = [v.read_value() - s for v, s in zip(variables, start)]
        with tf.name_scope(self._name + '_Allreduce'):
            combined = _collectives.grouped_allreduce(deltas, op=Adasum,
                                                      compression=self._compression,
                                                      process_set=self._process_set)
        assigns = [v.assign(s + d) for v, s, d in zip(variables, start, combined)]
        if tf.executing_eagerly():
            return None
        return tf.group(*assigns)


def _is_keras_optimizer(optimizer):
    classes = []
    for module in ('keras', 'tf_keras'):
        try:
            classes.append(__import__(module).optimizers.Optimizer)
        except (ImportError, AttributeError):
            pass
    try:
        classes.append(tf.keras.optimizers.Optimizer)
    except AttributeError:
        pass
    return isinstance(optimizer, tuple(classes))


def _keras_distributed_optimizer():
    try:
        from horovod.tensorflow.keras import DistributedOptimizer as keras_optimizer
    except ImportError as e:
        raise ImportError('hvd.DistributedOptimizer was given a Keras optimizer, which needs '
                          'horovod.tensorflow.keras (it could not be imported: {}).'
                          .format(e)) from e
    return keras_optimizer


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='',
                         device_sparse='', compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """An optimizer that reduces gradients across the ranks of ``process_set`` before applying
    them.

    Args:
        optimizer: a ``tf.compat.v1.train.Optimizer`` (wrapped here) or a Keras optimizer
            (handed to ``horovod.tensorflow.keras.DistributedOptimizer``).
        name: the wrapper's name (default ``Distributed<OptimizerClass>``).
        use_locking: passed to the legacy optimizer base class.
        device_dense, device_sparse: accepted for compatibility (host tensors).
        compression: ``hvd.Compression.none``/``fp16``/``bf16``, or (legacy optimizers) an
            error-feedback compressor, ``hvd.PowerSGD(rank=...)`` / ``hvd.Int8Quantizer()``.
        sparse_as_dense: reduce ``tf.IndexedSlices`` gradients as dense tensors.
        backward_passes_per_step: aggregate this many passes locally before reducing (TF1
            graphs, or Keras optimizers).
        op: ``hvd.Average``, ``hvd.Sum`` or ``hvd.Adasum`` (delta optimizer, global set only).
        gradient_predivide_factor: with Average, divide before the sum and multiply after.
        average_aggregated_gradients: divide the locally aggregated gradients by the pass count.
        num_groups: deprecated integer form of ``groups``.
        groups: None (one grouped reduction per step), an int, or lists of variables.
        process_set: the ranks to reduce over.
        scale_local_gradients: divide the gradients of ``register_local_var`` variables by the
            set size.
    """
    groups = check_reduction_args(op, gradient_predivide_factor, num_groups, groups,
                                  backward_passes_per_step, compression)

    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if op == Adasum:
            if process_set.process_set_id != 0:
                raise NotImplementedError('Adasum does not support non-global process sets yet.')
            if average_aggregated_gradients:
                raise ValueError('Adasum does not support average_aggregated_gradients == True')
            return _DistributedAdasumOptimizer(optimizer, name, use_locking, compression,
                                               process_set, backward_passes_per_step)
        return _DistributedOptimizer(
            optimizer, name=name, use_locking=use_locking, device_dense=device_dense,
            device_sparse=device_sparse, compression=compression, sparse_as_dense=sparse_as_dense,
            op=op, gradient_predivide_factor=gradient_predivide_factor,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups,
            process_set=process_set, scale_local_gradients=scale_local_gradients)

    if _is_keras_optimizer(optimizer):
        if op == Adasum:
            raise ValueError('op == Adasum is not supported yet with Keras')
        keras_optimizer = _keras_distributed_optimizer()
        return keras_optimizer(
            optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups,
            process_set=process_set, scale_local_gradients=scale_local_gradients)

    raise ValueError('Provided optimizer doesn\'t inherit from either legacy TensorFlow or '
                     'Keras optimizer: {}'.format(optimizer))
