"""mpi4py imported after hvd.init() under plain mpirun: Horovod initialized MPI (and finalizes it
at exit); mpi4py finds it initialized and shares it."""

import os

import torch

import horovod.torch as hvd

hvd.init()
from mpi4py import MPI  # noqa: E402

world = MPI.COMM_WORLD
assert (world.Get_rank(), world.Get_size()) == (hvd.rank(), hvd.size())
x = hvd.allreduce(torch.ones(2), op=hvd.Sum, name='late')
assert x.tolist() == [float(hvd.size())] * 2
assert world.allreduce(1) == hvd.size()
os.write(1, 'OK {}\n'.format(hvd.rank()).encode())
