"""Horovod for MXNet 1.9 (CPU NDArrays).

    import horovod.mxnet as hvd
    hvd.init()
    trainer = hvd.DistributedTrainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)

Collectives run as operations of MXNet's dependency engine: see docs/mxnet.md.
"""

from horovod.common import basics as _basics

if _basics._core is None:
    import warnings as _warnings
    _warnings.warn('Horovod was not built with its core extension (horovod._core could not be '
                   'imported: {}); horovod.mxnet exports nothing.'.format(
                       _basics._core_import_error))
else:
    from horovod.common.basics import *  # noqa: F401,F403 (init, size, rank, ...)
    from horovod.mxnet.compression import Compression  # noqa: F401
    from horovod.mxnet.functions import (allgather_object, broadcast_object,  # noqa: F401
                                         broadcast_parameters)
    from horovod.mxnet.mpi_ops import (  # noqa: F401
        allreduce, allreduce_, grouped_allreduce, grouped_allreduce_, allgather,
        grouped_allgather, broadcast, broadcast_, alltoall, reducescatter,
        grouped_reducescatter, synchronize,
        ProcessSet, global_process_set, add_process_set, remove_process_set,
        Average, Sum, Adasum, Min, Max, Product)
    from horovod.mxnet.optimizer import DistributedOptimizer, DistributedTrainer  # noqa: F401
