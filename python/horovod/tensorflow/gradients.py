"""Reducing a step's gradients: the part shared by ``DistributedGradientTape``, the legacy
``DistributedOptimizer`` and the Keras optimizer wrappers.

``_make_allreduce_grads_fn(...)`` returns ``allreduce_grads(grads, vars=None,
use_generic_names=False)``. Gradients are reduced in groups, each group one grouped allreduce,
so a step crosses into the core once per group (eagerly and inside ``tf.function``):

* ``groups=None``: every gradient in one group;
* ``groups=k`` (int > 0): the non-None gradients split into k contiguous, nearly equal groups;
* ``groups=[[v1, v2], [v3], ...]`` (lists of variables): those groups, in that order, then every
  other gradient alone (needs ``vars``).

An error-feedback compressor (``PowerSGD``, ``Int8Quantizer``) instead
takes every gradient of the call at once and runs its own grouped allreduces (no ``groups``).
None gradients stay None. Average with ``gradient_predivide_factor`` f is split as prescale 1/f
and postscale f (the core then divides by the set size), as the torch optimizer does. When this
rank is not in the process set, or the set has one rank, the gradients are returned unreduced
(under ``HOROVOD_ELASTIC=1`` they are always reduced, since the size may change).
"""

import os

import tensorflow as tf

from horovod.common.error_feedback import Comm, ErrorFeedbackCompressor, check_error_feedback_args
from horovod.common.gradient_groups import check_variable_groups, group_indices
from horovod.common.optimizer_args import check_optimizer_args
from horovod.common.process_sets import global_process_set
from horovod.tensorflow import collectives as _collectives
from horovod.tensorflow import mpi_ops as _mpi
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.mpi_ops import Average, Max, Sum
from horovod.tensorflow.util import _cache, refs_to_vars, var_ref, vars_to_refs


def check_reduction_args(op, gradient_predivide_factor, num_groups, groups,
                         backward_passes_per_step=1, compression=None):
    """Validates the arguments every gradient wrapper takes (``check_optimizer_args``, groups
    of TensorFlow variables); returns the effective ``groups`` (a list when given as lists)."""
    groups = check_optimizer_args(op, gradient_predivide_factor, num_groups, groups,
                                  backward_passes_per_step)
    if compression is not None:
        check_error_feedback_args(compression, op, gradient_predivide_factor, groups, Average,
                                  Sum)
    check_variable_groups(groups, _is_variable, key=var_ref)
    return list(groups) if isinstance(groups, tuple) else groups


def _is_variable(var):
    if isinstance(var, tf.Variable):
        return True
    # Keras 3 variables are not tf.Variable; they carry the TensorFlow one as ``.value``.
    return hasattr(var, 'assign') and hasattr(var, 'trainable') and hasattr(var, 'dtype')


def reduction_is_identity(process_set):
    """Whether reducing over ``process_set`` would change nothing on this rank (not a member, or
    a one-rank set), decided now; elastic jobs always reduce."""
    if os.environ.get('HOROVOD_ELASTIC') == '1':
        return False
    ranks = process_set.ranks
    if ranks is None:  # global set before init: let the collective report it
        return False
    return _mpi.rank() not in ranks or len(ranks) == 1


def _make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense,
                             op, gradient_predivide_factor, groups,
                             process_set=global_process_set):
    """The gradient reduction function of the wrappers (see the module docstring). ``name``
    prefixes the name scope (``<name>_Allreduce``) in graphs."""
    if op == Average:
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale, postscale = 1.0, 1.0
    compression = compression or Compression.none

    def reduce_group(tensors, first_index, use_generic_names):
        kwargs = {}
        if use_generic_names:
            kwargs = dict(name='grad_{}'.format(first_index), ignore_name_scope=True)
        return _collectives.grouped_allreduce(
            tensors, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, op=op, prescale_factor=prescale, postscale_factor=postscale,
            process_set=process_set, **kwargs)

    def allreduce_grads(grads, vars=None, use_generic_names=False):
        grads = list(grads)
        if reduction_is_identity(process_set):
            return grads
        if isinstance(compression, ErrorFeedbackCompressor):
            with tf.name_scope((name or 'Distributed') + '_Allreduce'):
                return _error_feedback_reduce(compression, grads, vars, op, process_set)
        if sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        result = list(grads)
        scope = (name or 'Distributed') + '_Allreduce'
        with tf.name_scope(scope):
            for indices in group_indices(grads, vars, groups, key=var_ref):
                reduced = reduce_group([grads[i] for i in indices], indices[0],
                                       use_generic_names)
                for i, r in zip(indices, reduced):
                    result[i] = r
        return result

    return allreduce_grads


_EF_OPS = {'average': Average, 'sum': Sum, 'max': Max}


def _error_feedback_reduce(compressor, grads, vars, op, process_set):
    """The non-None gradients through ``compressor`` (keyed by variable, else by position);
    ``tf.IndexedSlices`` are made dense first."""
    idx = [i for i, g in enumerate(grads) if g is not None]
    dense = [tf.convert_to_tensor(grads[i]) for i in idx]
    keys = [var_ref(vars[i]) if vars is not None else ('gradient', i) for i in idx]
    size = len(process_set.ranks) if process_set.ranks is not None else _mpi.size()
    prefix = 'horovod_' + type(compressor).__name__.lower()

    def allreduce(tensors, kind, tag):
        return _collectives.grouped_allreduce(
            tensors, op=_EF_OPS[kind], process_set=process_set, ignore_name_scope=True,
            name='{}_{}'.format(prefix, tag.replace('.', '_')))
    reduced = compressor.reduce(dense, keys, Comm(allreduce, size))
    out = list(grads)
    for i, r in zip(idx, reduced):
        out[i] = r * size if op == Sum else r
    return out


@_cache
def _cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense,
                               op, gradient_predivide_factor, groups, process_set):
    groups = refs_to_vars(groups) if isinstance(groups, tuple) else groups
    return _make_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                                    sparse_as_dense, op, gradient_predivide_factor, groups,
                                    process_set)


def _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                                    sparse_as_dense, op, gradient_predivide_factor, groups,
                                    process_set=global_process_set):
    """``_make_allreduce_grads_fn`` memoized per arguments (and per eager/graph context), as
    Horovod's: the same settings return the same function. ``groups`` may be a list of lists of
    variables (keyed by variable reference)."""
    groups = vars_to_refs(groups) if isinstance(groups, list) else groups
    return _cached_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                                      sparse_as_dense, op, gradient_predivide_factor, groups,
                                      process_set)


def scale_local_gradients(grads, process_set):
    """Local (unreduced) gradients divided by the set size, so that they have the scale of an
    averaged gradient (Horovod's ``scale_local_gradients=True``). Non-members: unchanged."""
    if process_set.ranks is None or _mpi.rank() not in process_set.ranks:
        return grads
    n = len(process_set.ranks)
    if n == 1:
        return grads
    out = []
    for g in grads:
        if g is None:
            out.append(None)
        elif isinstance(g, tf.IndexedSlices):
            out.append(tf.IndexedSlices(g.values / tf.cast(n, g.values.dtype), g.indices,
                                        g.dense_shape))
        else:
            out.append(g / tf.cast(n, g.dtype))
    return out
