"""Run under plain mpirun / mpiexec (no horovodrun, no HOROVOD_* variables): checks topology
against the launcher's own variables, the MPI queries, and torch collectives on the global set,
a static process set given as ranks, and a dynamic one. Prints 'OK <rank>' on success."""

import os
import sys

import torch

import horovod.torch as hvd

hvd.init(process_sets='dynamic')
rank, size = hvd.rank(), hvd.size()
env_rank = os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK'))
env_size = os.environ.get('OMPI_COMM_WORLD_SIZE', os.environ.get('PMI_SIZE'))
assert (rank, size) == (int(env_rank), int(env_size)), (rank, size, env_rank, env_size)
assert (hvd.local_rank(), hvd.local_size()) == (rank, size)  # one host
assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1)
assert hvd.mpi_built() and hvd.mpi_enabled()
expect_threads = os.environ.get('HOROVOD_MPI_THREADS_DISABLE', '0') in ('0', '')
assert hvd.mpi_threads_supported() == expect_threads, hvd.mpi_threads_supported()

x = torch.arange(10, dtype=torch.float32) * (rank + 1)
total = hvd.allreduce(x, op=hvd.Sum, name='sum')
assert torch.equal(total, torch.arange(10, dtype=torch.float32) * (size * (size + 1) // 2)), total
gathered = hvd.allgather(torch.full((rank + 1, 2), float(rank)), name='gather')
assert gathered.shape == (size * (size + 1) // 2, 2)
b = torch.full((3,), float(rank))
hvd.broadcast_(b, root_rank=size - 1, name='bcast')
assert torch.equal(b, torch.full((3,), float(size - 1)))

evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
if rank % 2 == 0:
    s = hvd.allreduce(torch.ones(4), op=hvd.Sum, process_set=evens, name='evens')
    assert torch.equal(s, torch.full((4,), float(len(evens.ranks)))), s
hvd.remove_process_set(evens)
hvd.barrier()
os.write(1, 'OK {}\n'.format(rank).encode())  # one write: MPICH interleaves ranks' output
sys.exit(0)
