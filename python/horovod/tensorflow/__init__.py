"""Horovod for TensorFlow 2 (and TF1-style graphs through ``tf.compat.v1``).

    import horovod.tensorflow as hvd
    hvd.init()
    tape = hvd.DistributedGradientTape(tape)      # or hvd.DistributedOptimizer(opt)
    hvd.broadcast_variables(model.variables, root_rank=0)

Module map: ``mpi_ops`` (raw collectives, basics), ``collectives`` (allreduce with compression
and sparse gradients), ``functions`` (variable and object broadcasts), ``gradients`` (grouped
gradient reduction), ``gradient_tape``, ``optimizer`` (+ ``gradient_aggregation``),
``sync_batch_norm``, ``session_hooks``, ``elastic``, ``util``.

Collectives are TensorFlow ops: they run eagerly, inside ``tf.function`` and in TF1 graphs,
and are differentiable. No ``poll``/``synchronize`` (nothing is asynchronous at this level).
"""

import os as _os

# TensorFlow's default CPU allocator hands every large output fresh pages (a page fault per 4 KiB
# on first touch: most of an allreduce's time from 1 MiB up); its BFC allocator reuses buffers.
# Read when TensorFlow creates its CPU allocator (the first op), so this takes effect when
# horovod.tensorflow is imported before any op runs; an explicit setting is kept.
_os.environ.setdefault('TF_CPU_ALLOCATOR_USE_BFC', 'true')

from horovod.common import basics as _basics  # noqa: E402


def _exclude_from_autograph():
    """Keeps ``tf.function``'s AutoGraph from converting Horovod's own Python code, as it
    skips TensorFlow's and Keras's: the conversion changes nothing for these functions (their
    control flow depends on Python values) and costs about a second per function the first time a
    user's ``tf.function`` is traced. A private TensorFlow table; if it moves, nothing breaks,
    tracing is only slower."""
    try:
        from tensorflow.python.autograph.core import config as _ag_config
    except ImportError:  # pragma: no cover
        return
    _ag_config.CONVERSION_RULES = ((_ag_config.DoNotConvert('horovod'),) +
                                   tuple(_ag_config.CONVERSION_RULES))


if _basics._core is None:
    import warnings as _warnings
    _warnings.warn('Horovod was not built with its core extension (horovod._core could not be '
                   'imported: {}); horovod.tensorflow exports nothing.'.format(
                       _basics._core_import_error))
else:
    _exclude_from_autograph()
    from horovod.common.basics import *  # noqa: F401,F403 (init, size, rank, ...)
    from horovod.common.exceptions import HorovodInternalError  # noqa: F401
    from horovod.tensorflow.collectives import (  # noqa: F401
        allreduce, grouped_allreduce, reducescatter, grouped_reducescatter)
    from horovod.tensorflow.compression import Compression, Int8Quantizer, PowerSGD  # noqa: F401
    from horovod.tensorflow.functions import (  # noqa: F401
        allgather_object, broadcast_, broadcast_global_variables, broadcast_object,
        broadcast_object_fn, broadcast_variables)
    from horovod.tensorflow.mpi_ops import (  # noqa: F401
        allgather, grouped_allgather, broadcast, alltoall, join,
        size_op, local_size_op, rank_op, local_rank_op, process_set_included_op,
        ProcessSet, global_process_set, add_process_set, remove_process_set,
        Average, Sum, Adasum, Min, Max, Product)
    from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper  # noqa: F401
    from horovod.tensorflow.gradient_tape import (  # noqa: F401
        DistributedGradientTape, PartialDistributedGradientTape, _DistributedGradientTape)
    from horovod.tensorflow.gradients import (  # noqa: F401
        _make_allreduce_grads_fn, _make_cached_allreduce_grads_fn)
    from horovod.tensorflow.optimizer import (  # noqa: F401
        DistributedOptimizer, _DistributedOptimizer, _DistributedAdasumOptimizer)
    from horovod.tensorflow.session_hooks import BroadcastGlobalVariablesHook  # noqa: F401
    from horovod.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
    from horovod.tensorflow import elastic  # noqa: F401
    # Private names of Horovod's horovod.tensorflow namespace that its test suite and user
    # helpers reach through ``hvd.`` (same meaning as there).
    from horovod.tensorflow.mpi_ops import (  # noqa: F401
        _allreduce, _grouped_allreduce, _reducescatter, _grouped_reducescatter)
    from horovod.tensorflow.util import (  # noqa: F401
        _IS_TF2, _executing_eagerly, _make_subgraph, _cache, vars_to_refs, refs_to_vars)
    import tensorflow as _tf
    _LegacyOptimizer = _tf.compat.v1.train.Optimizer
    del _tf
