"""Dynamic process sets from mpi4py communicators, and a set whose communicator differs between
ranks (each rank must get the same ValueError). Run under mpirun with >= 2 ranks."""

import os

from mpi4py import MPI

import torch

import horovod.torch as hvd

world = MPI.COMM_WORLD
wrank, wsize = world.Get_rank(), world.Get_size()
hvd.init(process_sets='dynamic')
odds_comm = world.Split(0 if wrank % 2 == 1 else MPI.UNDEFINED, wrank)
odds = hvd.add_process_set(hvd.ProcessSet(odds_comm))
assert odds.ranks == list(range(1, wsize, 2)), odds.ranks
if odds.included():
    s = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=odds, name='odds')
    assert torch.equal(s, torch.full((2,), float(len(odds.ranks))))
hvd.remove_process_set(odds)

# Split by parity: every rank is in a communicator, but not the same one.
parity = world.Split(wrank % 2, wrank)
try:
    hvd.add_process_set(hvd.ProcessSet(parity))
except ValueError as e:
    assert 'differs between ranks' in str(e), e
else:
    raise AssertionError('a communicator that differs between ranks was accepted')
hvd.barrier()
hvd.shutdown()
os.write(1, 'OK {}\n'.format(wrank).encode())  # one write: MPICH interleaves output
