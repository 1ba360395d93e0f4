"""Every PyTorch operation of Horovod in one module, as Horovod's ``horovod.torch.mpi_ops``: the
asynchronous and in-place forms, handles, join, barrier and the basics
(``horovod.torch.async_ops``), and the differentiable synchronous forms with the autograd
Functions behind them (``horovod.torch.collectives``, built on the former)."""

from horovod.torch.async_ops import *  # noqa: F401,F403
from horovod.torch.collectives import (  # noqa: F401
    HorovodAllgather, HorovodAllreduce, HorovodAlltoall, HorovodBroadcast,
    HorovodGroupedAllgather, HorovodGroupedAllreduce, HorovodGroupedReducescatter,
    HorovodReducescatter, allgather, allreduce, alltoall, broadcast, grouped_allgather,
    grouped_allreduce, grouped_reducescatter, reducescatter)
