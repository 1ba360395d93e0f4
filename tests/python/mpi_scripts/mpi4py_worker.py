"""mpi4py beside Horovod (run under mpirun with >= 2 ranks): hvd.init(comm=MPI.COMM_WORLD) or a
sub-communicator, process sets from communicators (static and dynamic), and mpi4py collectives
interleaved with Horovod's. argv[1]: 'world' or 'sub'. Prints 'OK <rank>' on success."""

import os
import sys

from mpi4py import MPI  # initializes MPI first: Horovod must then leave init/finalize to mpi4py

import torch

import horovod.torch as hvd

mode = sys.argv[1]
world = MPI.COMM_WORLD
wrank, wsize = world.Get_rank(), world.Get_size()

if mode == 'sub':
    # Ranks 0..size-2 form the Horovod job; the last rank only takes part in mpi4py calls.
    sub = world.Split(0 if wrank < wsize - 1 else MPI.UNDEFINED, wrank)
    if sub == MPI.COMM_NULL:
        try:
            hvd.init(comm=sub)
        except ValueError as e:
            assert 'not a member' in str(e), e
        else:
            raise AssertionError('hvd.init(comm=MPI.COMM_NULL) was accepted')
        total = world.allreduce(1)  # matches the members' mpi4py allreduce below
        assert total == wsize
        os.write(1, 'OK {} outside\n'.format(wrank).encode())
        sys.exit(0)
    hvd.init(comm=sub)
    assert (hvd.rank(), hvd.size()) == (sub.Get_rank(), sub.Get_size())
    x = hvd.allreduce(torch.ones(3), op=hvd.Sum, name='sub')
    assert torch.equal(x, torch.full((3,), float(wsize - 1))), x
    total = world.allreduce(1)
    assert total == wsize
    hvd.shutdown()
    os.write(1, 'OK {}\n'.format(wrank).encode())  # one write: MPICH interleaves output
    sys.exit(0)

# Static process sets from communicators: the even ranks (others pass COMM_NULL).
evens_comm = world.Split(0 if wrank % 2 == 0 else MPI.UNDEFINED, wrank)
evens = hvd.ProcessSet(evens_comm)
hvd.init(comm=world, process_sets=[evens])
assert (hvd.rank(), hvd.size()) == (wrank, wsize)
assert hvd.mpi_enabled() and hvd.mpi_threads_supported()
assert evens.ranks == list(range(0, wsize, 2)), evens.ranks
for step in range(3):
    # Interleave: Horovod allreduce, mpi4py allreduce, Horovod allgather, mpi4py bcast.
    h = hvd.allreduce(torch.full((5,), float(wrank)), op=hvd.Sum, name='step%d' % step)
    assert torch.equal(h, torch.full((5,), float(wsize * (wsize - 1) // 2)))
    m = world.allreduce(wrank, op=MPI.SUM)
    assert m == wsize * (wsize - 1) // 2
    g = hvd.allgather(torch.tensor([wrank]), name='g%d' % step)
    assert g.tolist() == list(range(wsize))
    assert world.bcast('hello' if wrank == 0 else None, root=0) == 'hello'
if evens.included():
    s = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=evens, name='evens')
    assert torch.equal(s, torch.full((2,), float(len(evens.ranks))))
hvd.barrier()  # shutdown ends the job for every rank: wait for the set's members
hvd.shutdown()
os.write(1, 'OK {}\n'.format(wrank).encode())  # one write: MPICH interleaves output
