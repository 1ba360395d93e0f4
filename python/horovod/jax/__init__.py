"""Horovod for JAX (CPU arrays).

    import horovod.jax as hvd
    hvd.init()
    params = hvd.broadcast_parameters(params, root_rank=0)
    tx = hvd.DistributedOptimizer(optax.adam(1e-3))   # or any init/update pair
    grads = hvd.allreduce_gradients(grads)              # plain pytrees

Collectives work eagerly and inside jax.jit (through ordered io_callback): see docs/jax.md.
"""

from horovod.common import basics as _basics

if _basics._core is None:
    import warnings as _warnings
    _warnings.warn('Horovod was not built with its core extension (horovod._core could not be '
                   'imported: {}); horovod.jax exports nothing.'.format(
                       _basics._core_import_error))
else:
    from horovod.common.basics import *  # noqa: F401,F403 (init, size, rank, ...)
    from horovod.common.exceptions import HorovodInternalError  # noqa: F401
    from horovod.jax import elastic  # noqa: F401
    from horovod.jax.compression import Compression  # noqa: F401
    from horovod.jax.functions import (allgather_object, broadcast_object,  # noqa: F401
                                       broadcast_parameters)
    from horovod.jax.mpi_ops import (  # noqa: F401
        allreduce, grouped_allreduce, allgather, grouped_allgather, broadcast, alltoall,
        reducescatter, grouped_reducescatter, join, barrier,
        ProcessSet, global_process_set, add_process_set, remove_process_set,
        Average, Sum, Adasum, Min, Max, Product)
    from horovod.jax.optimizer import (DistributedOptimizer,  # noqa: F401
                                       DistributedOptimizerState, allreduce_gradients)
