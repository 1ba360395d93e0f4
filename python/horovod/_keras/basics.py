"""Lifecycle and topology for the Keras modules: Horovod's basics, with init and shutdown
resetting every unnamed-collective counter the Keras adapters may use (their own, and those of
``horovod.tensorflow`` and ``horovod.torch`` when loaded), so that the names of unnamed calls
match across ranks after an elastic reset."""

import sys

from horovod._keras import numpy_ops
from horovod.common.basics import HorovodBasics


def _reset_counters():
    numpy_ops.reset()
    execute = sys.modules.get('horovod.tensorflow._execute')
    if execute is not None:
        execute.reset_counter()
    torch_ops = sys.modules.get('horovod.torch.mpi_ops')
    if torch_ops is not None:
        torch_ops._reset_handles()


basics = HorovodBasics(on_init=_reset_counters, on_shutdown=_reset_counters)

init = basics.init
shutdown = basics.shutdown
is_initialized = basics.is_initialized
start_timeline = basics.start_timeline
stop_timeline = basics.stop_timeline
size = basics.size
local_size = basics.local_size
cross_size = basics.cross_size
rank = basics.rank
local_rank = basics.local_rank
cross_rank = basics.cross_rank
mpi_threads_supported = basics.mpi_threads_supported
mpi_enabled = basics.mpi_enabled
mpi_built = basics.mpi_built
gloo_enabled = basics.gloo_enabled
gloo_built = basics.gloo_built
nccl_built = basics.nccl_built
ddl_built = basics.ddl_built
ccl_built = basics.ccl_built
cuda_built = basics.cuda_built
rocm_built = basics.rocm_built
engine_counters = basics.engine_counters
