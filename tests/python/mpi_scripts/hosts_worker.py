"""Run by tests/multiproc/mpi_ssh_netns.sh under mpirun / mpiexec across two network-namespace
"hosts": allreduce (small and 4 MiB) and allgather, then one line with this rank's placement, its
namespace and how many collectives ran through MPI (HOROVOD_CPU_OPERATIONS=mpi)."""

import os
import subprocess

import torch

import horovod.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
ns = subprocess.run(['ip', 'netns', 'identify'], capture_output=True, text=True).stdout.strip()
x = hvd.allreduce(torch.full((1000,), float(rank + 1)), op=hvd.Sum, name='small')
assert torch.equal(x, torch.full((1000,), float(size * (size + 1) // 2))), x
big = hvd.allreduce(torch.full((1 << 20,), float(rank)), op=hvd.Sum, name='big')
assert torch.equal(big, torch.full((1 << 20,), float(size * (size - 1) // 2))), big
g = hvd.allgather(torch.tensor([rank, hvd.local_rank()]), name='gather')
assert g.tolist() == [v for r in range(size) for v in (r, r % hvd.local_size())], g
os.write(1, 'RANK {} size={} local={}/{} cross={}/{} ns={} mpi_collectives={}\n'.format(
    rank, size, hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(), ns,
    sum(n for (backend, _), n in hvd.engine_counters().items() if backend == 'mpi')).encode())
