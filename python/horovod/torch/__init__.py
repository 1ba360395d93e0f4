"""Horovod for PyTorch.

    import horovod.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
"""

from horovod.common import basics as _basics
from horovod.common.util import check_extension  # noqa: F401

if _basics._core is None:
    import warnings as _warnings
    _warnings.warn('Horovod was not built with its core extension (horovod._core could not be '
                   'imported: {}); horovod.torch exports nothing.'.format(
                       _basics._core_import_error))
else:
    from horovod.common.basics import *  # noqa: F401,F403 (init, size, rank, ...)
    from horovod.common.exceptions import HorovodInternalError  # noqa: F401
    from horovod.torch import elastic  # noqa: F401
    from horovod.torch.compression import Compression, Int8Quantizer, PowerSGD  # noqa: F401
    from horovod.torch.functions import (allgather_object, broadcast_object,  # noqa: F401
                                         broadcast_optimizer_state, broadcast_parameters)
    from horovod.torch.mpi_ops import (  # noqa: F401
        allreduce, allreduce_async, allreduce_, allreduce_async_,
        grouped_allreduce, grouped_allreduce_async, grouped_allreduce_,
        grouped_allreduce_async_, sparse_allreduce_async,
        allgather, allgather_async, grouped_allgather, grouped_allgather_async,
        broadcast, broadcast_async, broadcast_, broadcast_async_,
        alltoall, alltoall_async,
        reducescatter, reducescatter_async, grouped_reducescatter,
        grouped_reducescatter_async,
        join, barrier, poll, synchronize,
        ProcessSet, global_process_set, add_process_set, remove_process_set,
        Average, Sum, Adasum, Min, Max, Product)
    from horovod.torch.optimizer import DistributedOptimizer  # noqa: F401
    from horovod.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
