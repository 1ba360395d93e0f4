"""Horovod for ``tf.keras``: Keras 3 on TensorFlow, or tf-keras 2 with ``TF_USE_LEGACY_KERAS=1``.

    import horovod.tensorflow.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss=...)
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
"""

import tensorflow as _tf

from horovod._keras import optimizer as _optimizer
from horovod._keras import saving as _saving
from horovod._keras import values as _values
from horovod._keras.backend import KerasBackend as _KerasBackend
from horovod._keras.basics import (  # noqa: F401
    init, shutdown, is_initialized, start_timeline, stop_timeline, size, local_size, cross_size,
    rank, local_rank, cross_rank, mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled,
    gloo_built, nccl_built, ddl_built, ccl_built, cuda_built, rocm_built, engine_counters)
from horovod.common.ops import Average, Sum  # noqa: F401
from horovod.common.process_sets import (  # noqa: F401
    ProcessSet, global_process_set, add_process_set, remove_process_set)
from horovod.common.util import get_average_backwards_compatibility_fun as _average_compat
from horovod.tensorflow.compression import Compression

_backend = _KerasBackend(_tf.keras)


class _ReduceOps:
    Average = Average
    Sum = Sum


_resolve_op = _average_compat(_ReduceOps)


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A new optimizer of the same class (and class name) as ``optimizer``, built from its
    config, that allreduces each step's gradients across the ranks of ``process_set`` (one
    grouped call per step, or one per group of ``groups``) before applying them.

    op: Average or Sum. gradient_predivide_factor: Average only; gradients are divided by it
    before the sum and multiplied after. backward_passes_per_step: sum gradients locally over
    that many calls, then reduce and apply (divided by the count when
    average_aggregated_gradients). sparse_as_dense: reduce tf.IndexedSlices as dense tensors
    (otherwise they are gathered). register_local_var(var) on the result keeps a variable's
    gradient local (divided by the set size when scale_local_gradients). ``device_dense`` /
    ``device_sparse``: TensorFlow devices for the reduction ops (TensorFlow backend only).
    """
    return _optimizer.create_distributed_optimizer(
        _backend, optimizer, name=name, compression=compression, device_dense=device_dense,
        device_sparse=device_sparse,
        sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor,
        op=op, backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)


def broadcast_global_variables(root_rank):
    """TF1 graph mode only: broadcasts all global variables from ``root_rank`` now. With eager
    TensorFlow use ``callbacks.BroadcastGlobalVariablesCallback``."""
    return _values.broadcast_global_variables(_backend, root_rank)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Reduces a tensor-compatible value over all ranks (default Average); returns a tensor."""
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
    """Loads a saved model (``.keras``; h5 or SavedModel with tf-keras) with its optimizer
    wrapped in DistributedOptimizer (``compression`` applied), its saved state restored."""
    def wrap(opt):
        return DistributedOptimizer(opt, compression=compression)
    return _saving.load_model(_backend, wrap, filepath, custom_optimizers, custom_objects,
                              legacy_opts)


from horovod.tensorflow.keras import callbacks, elastic  # noqa: E402,F401
