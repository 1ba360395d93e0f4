"""The user-level reductions of ``horovod.tensorflow``: compression, the deprecated ``average=``
argument, ``tf.IndexedSlices`` (sparse gradients) and the grouped forms, over the raw ops of
``horovod.tensorflow.mpi_ops``."""

import contextlib

import tensorflow as tf

from horovod.common.util import get_average_backwards_compatibility_fun
from horovod.tensorflow import mpi_ops as _mpi
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.mpi_ops import (Adasum, Average, Sum, _as_tensor, global_process_set)


class _ReduceOps:
    Average = Average
    Sum = Sum


_resolve_op = get_average_backwards_compatibility_fun(_ReduceOps)


def _sparse_checks(op, prescale_factor, postscale_factor):
    if op == Adasum:
        raise NotImplementedError('The Adasum reduction does not currently support sparse tensors. '
                                  'As a workaround please pass sparse_as_dense=True to '
                                  'DistributedOptimizer')
    if op not in (Average, Sum):
        raise NotImplementedError('Only Sum and Average ops are supported with tf.IndexedSlices')
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError('Pre/postscale_factor are not supported with tf.IndexedSlices')


def _placed(device):
    """Places the ops created inside on ``device`` (Horovod's ``device_dense``/``device_sparse``;
    '' leaves placement to TensorFlow). Horovod's kernels are CPU kernels: with TensorFlow's soft
    placement (the default) an accelerator name falls back to the CPU."""
    return tf.device(device) if device else contextlib.nullcontext()


def _set_size(process_set):
    return _mpi._set_size_and_rank(process_set)[0]


def _sparse_allreduce(slices, name, op, process_set, ignore_name_scope):
    """IndexedSlices: every rank's values and indices, gathered (Average divides the values by
    the set size)."""
    values = _mpi.allgather(slices.values, name=None if name is None else name + '_values',
                            ignore_name_scope=ignore_name_scope, process_set=process_set)
    indices = _mpi.allgather(slices.indices, name=None if name is None else name + '_indices',
                             ignore_name_scope=ignore_name_scope, process_set=process_set)
    if op == Average:
        values = tf.math.divide(values, tf.cast(_set_size(process_set), values.dtype))
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense='', device_sparse='',
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Reduces ``tensor`` over the ranks of ``process_set`` (default op: Average). A
    ``tf.IndexedSlices`` is gathered instead (values and indices from every rank). Returns a
    tensor of the input's shape and dtype; differentiable. The ops run on ``device_dense``
    (dense tensors) or ``device_sparse`` (``tf.IndexedSlices``) when given."""
    op = _resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _sparse_checks(op, prescale_factor, postscale_factor)
        with _placed(device_sparse):
            return _sparse_allreduce(tensor, name, op, process_set, ignore_name_scope)
    tensor = _as_tensor(tensor)
    with _placed(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _mpi._allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor,
                                  ignore_name_scope=ignore_name_scope, process_set=process_set)
        return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Allreduce of a list of tensors as one unit: one crossing into the core, negotiated
    together, fused where they fit. ``tf.IndexedSlices`` members are gathered. Returns a list in
    the input order; an empty list is returned unchanged. Ops run on ``device_dense`` /
    ``device_sparse`` when given."""
    if not tensors:
        return tensors
    op = _resolve_op(op, average)
    dense_idx = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    results = list(tensors)
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            _sparse_checks(op, prescale_factor, postscale_factor)
            with _placed(device_sparse):
                results[i] = _sparse_allreduce(
                    t, None if name is None else '{}_{}'.format(name, i), op, process_set,
                    ignore_name_scope)
    if dense_idx:
        with _placed(device_dense):
            compressed, ctxs = zip(*[compression.compress(_as_tensor(tensors[i]))
                                     for i in dense_idx])
            reduced = _mpi._grouped_allreduce(list(compressed), name=name, op=op,
                                              prescale_factor=prescale_factor,
                                              postscale_factor=postscale_factor,
                                              ignore_name_scope=ignore_name_scope,
                                              process_set=process_set)
            for i, r, ctx in zip(dense_idx, reduced, ctxs):
                results[i] = compression.decompress(r, ctx)
    return results


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces ``tensor`` over the set; this rank gets its block of dimension 0. Sum or Average
    only. Differentiable. Runs on ``device_dense`` when given."""
    with _placed(device_dense):
        compressed, ctx = compression.compress(_as_tensor(tensor))
        reduced = _mpi.reducescatter(compressed, name=name, op=op,
                                     ignore_name_scope=ignore_name_scope,
                                     process_set=process_set, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor)
        return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None, ignore_name_scope=False):
    """Reducescatter of each tensor of a list, as one unit. All inputs must share a dtype. Runs
    on ``device_dense`` when given."""
    if not tensors:
        return tensors
    tensors = [_as_tensor(t) for t in tensors]
    if len({t.dtype for t in tensors}) > 1:
        raise ValueError('grouped_reducescatter: all tensors must have the same dtype, got {}'
                         .format(sorted({t.dtype.name for t in tensors})))
    with _placed(device_dense):
        compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
        reduced = _mpi.grouped_reducescatter(list(compressed), name=name, op=op,
                                             ignore_name_scope=ignore_name_scope,
                                             process_set=process_set,
                                             prescale_factor=prescale_factor,
                                             postscale_factor=postscale_factor)
        return [compression.decompress(r, c) for r, c in zip(reduced, ctxs)]
