"""Horovod for standalone Keras 3, on any of its backends (TensorFlow, PyTorch, JAX: set
``KERAS_BACKEND`` before importing keras).

    import keras
    import horovod.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss=...)
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
"""

import keras as _keras_module

from horovod._keras import optimizer as _optimizer
from horovod._keras import saving as _saving
from horovod._keras import values as _values
from horovod._keras.backend import KerasBackend as _KerasBackend
from horovod._keras.basics import (  # noqa: F401
    init, shutdown, is_initialized, start_timeline, stop_timeline, size, local_size, cross_size,
    rank, local_rank, cross_rank, mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled,
    gloo_built, nccl_built, ddl_built, ccl_built, cuda_built, rocm_built, engine_counters)
from horovod._keras.compression import Compression
from horovod.common.ops import Adasum, Average, Sum  # noqa: F401
from horovod.common.process_sets import (  # noqa: F401
    ProcessSet, global_process_set, add_process_set, remove_process_set)
from horovod.common.util import get_average_backwards_compatibility_fun as _average_compat

_backend = _KerasBackend(_keras_module)


class _ReduceOps:
    Average = Average
    Sum = Sum


_resolve_op = _average_compat(_ReduceOps)


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, num_groups=0, groups=None,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         process_set=global_process_set, scale_local_gradients=True):
    """A new optimizer of the same class (and class name) as ``optimizer``, built from its
    config, that allreduces each step's gradients (one grouped call per step, or per group of
    ``groups``) before applying them, on whichever backend Keras runs.

    op: Average or Sum. gradient_predivide_factor: Average only. backward_passes_per_step:
    sum gradients locally over that many calls, then reduce and apply. ``register_local_var(var)`` on the result keeps a variable's gradient local.
    ``compression``: ``hvd.Compression.fp16``/``bf16`` cast with keras.ops on any backend.
    ``device_dense`` / ``device_sparse``: TensorFlow devices for the reduction ops (TensorFlow
    backend only; ValueError on the others).
    """
    return _optimizer.create_distributed_optimizer(
        _backend, optimizer, name=name, compression=compression, device_dense=device_dense,
        device_sparse=device_sparse,
        sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor,
        op=op, backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose ``local_layers`` (a Keras layer or a list of them) keep their
    trainable weights' gradients local."""
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, _keras_module.layers.Layer):
        local_layers = [local_layers]
    for layer in local_layers:
        if not isinstance(layer, _keras_module.layers.Layer):
            raise ValueError('local_layers must be a Keras layer or a list of Keras layers, got '
                             '{}'.format(type(layer).__name__))
    opt = DistributedOptimizer(optimizer, name=name, device_dense=device_dense,
                               device_sparse=device_sparse, compression=compression,
                               sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               groups=groups, backward_passes_per_step=backward_passes_per_step,
                               average_aggregated_gradients=average_aggregated_gradients,
                               process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt


def broadcast_global_variables(root_rank):
    """TF1 graph mode only (there are no global variables in Keras 3): use
    ``callbacks.BroadcastGlobalVariablesCallback`` instead."""
    return _values.broadcast_global_variables(_backend, root_rank)


def allreduce(value, name=None, average=True, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Reduces a tensor-compatible value over all ranks; returns a backend tensor. As in
    Horovod, ``average`` defaults to True here, so passing ``op`` needs ``average=None``."""
    return _values.allreduce(_backend, value, name, _resolve_op(op, average), prescale_factor,
                             postscale_factor, compression)


def allgather(value, name=None):
    """Concatenates every rank's value along dimension 0, in rank order."""
    return _values.allgather(_backend, value, name)


def broadcast(value, root_rank, name=None):
    """Returns root's value on every rank."""
    return _values.broadcast(_backend, value, root_rank, name)


def reducescatter(value, name=None, op=Average):
    """Reduces over all ranks; this rank gets its block of dimension 0."""
    return _values.reducescatter(_backend, value, name, op)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """Loads a saved ``.keras`` model with its optimizer wrapped in DistributedOptimizer
    (``compression`` applied) and its saved optimizer state restored."""
    def wrap(opt):
        return DistributedOptimizer(opt, compression=compression)
    return _saving.load_model(_backend, wrap, filepath, custom_optimizers, custom_objects,
                              legacy_opts)


from horovod.keras import callbacks, elastic  # noqa: E402,F401
