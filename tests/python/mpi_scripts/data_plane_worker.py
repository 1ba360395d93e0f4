"""Run under mpirun / mpiexec, with or without HOROVOD_CPU_OPERATIONS=mpi: every collective of the
data plane, for every dtype torch can hand Horovod, against values computed here; float16,
bfloat16 and bool reductions included (MPI-3 has none: the plugin reduces them with the core's
kernel). Then checks that the collectives ran through MPI exactly when the MPI data plane was
asked for (the engine's counter of MPI collectives). Prints 'OK <rank>' on success."""

import math
import os
import sys

import torch

import horovod.torch as hvd

hvd.init(process_sets='dynamic')
rank, size = hvd.rank(), hvd.size()
want_mpi = os.environ.get('HOROVOD_CPU_OPERATIONS', '').lower() == 'mpi'
assert hvd.mpi_enabled()

INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def check(got, want, what):
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert torch.equal(got, want), '{}: got {} want {}'.format(what, got, want)


# Allreduce: every op on every dtype. Rank r contributes (r + 1) * base; the results are exact in
# every dtype (small integers, halves and quarters).
base = torch.tensor([1.0, 0.5, 2.0, 0.25])
n_fact = math.factorial(size)
for dtype in INTS + FLOATS:
    x = (base * 4 if dtype in INTS else base).mul(rank + 1).to(dtype)
    b = (base * 4 if dtype in INTS else base)
    tag = str(dtype).split('.')[-1]
    check(hvd.allreduce(x, op=hvd.Sum, name='sum.' + tag), (b * (size * (size + 1) // 2)).to(dtype), 'sum ' + tag)
    check(hvd.allreduce(x, op=hvd.Min, name='min.' + tag), b.to(dtype), 'min ' + tag)
    check(hvd.allreduce(x, op=hvd.Max, name='max.' + tag), (b * size).to(dtype), 'max ' + tag)
    if dtype not in (torch.uint8, torch.int8):  # n! * base**n stays in range for these only
        check(hvd.allreduce(x, op=hvd.Product, name='prod.' + tag), (b ** size * n_fact).to(dtype), 'prod ' + tag)
    if dtype in FLOATS or dtype in (torch.int32, torch.int64):
        # Average: a sum then a postscale of 1/size (integers truncated, as on every backend).
        want = (b * (size * (size + 1) // 2)).double() / size
        check(hvd.allreduce(x, op=hvd.Average, name='avg.' + tag), want.to(dtype), 'average ' + tag)
    if dtype in FLOATS:
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=4.0, postscale_factor=0.5, name='scaled.' + tag)
        check(got, (b * (size * (size + 1) // 2) * 2).to(dtype), 'pre/postscale ' + tag)
        # In place.
        y = x.clone()
        hvd.allreduce_(y, op=hvd.Sum, name='inplace.' + tag)
        check(y, (b * (size * (size + 1) // 2)).to(dtype), 'in place ' + tag)

# bool: sum/max = or, min/product = and.
flag = torch.tensor([rank == 0, True, False, rank == size - 1])
check(hvd.allreduce(flag, op=hvd.Sum, name='bool.sum'), torch.tensor([True, True, False, True]), 'bool sum')
check(hvd.allreduce(flag, op=hvd.Min, name='bool.min'), torch.tensor([size == 1, True, False, size == 1]), 'bool min')
check(hvd.allreduce(flag, op=hvd.Max, name='bool.max'), torch.tensor([True, True, False, True]), 'bool max')

# Fused: a group of tensors of several sizes in one response (through the fusion buffer).
group = [torch.full((k + 1,), float(rank + k)) for k in range(5)]
for k, got in enumerate(hvd.grouped_allreduce(group, op=hvd.Sum, name='group')):
    check(got, torch.full((k + 1,), float(sum(r + k for r in range(size)))), 'grouped allreduce {}'.format(k))
handles = [hvd.allreduce_async(torch.full((1000,), 1.0, dtype=torch.bfloat16), op=hvd.Sum, name='async.{}'.format(k))
           for k in range(8)]
for h in handles:
    check(hvd.synchronize(h), torch.full((1000,), float(size), dtype=torch.bfloat16), 'async bfloat16')

# Allgather(v): rank r gives r + 1 rows; grouped (fused) too.
for dtype in INTS + FLOATS + [torch.bool]:
    x = torch.full((rank + 1, 3), rank % 2 if dtype == torch.bool else rank).to(dtype)
    want = torch.cat([torch.full((r + 1, 3), r % 2 if dtype == torch.bool else r).to(dtype) for r in range(size)])
    check(hvd.allgather(x, name='gather.' + str(dtype)), want, 'allgather ' + str(dtype))
outs = hvd.grouped_allgather([torch.full((rank + 1,), float(rank)), torch.full((rank + 2, 2), float(-rank))],
                             name='ggather')
check(outs[0], torch.cat([torch.full((r + 1,), float(r)) for r in range(size)]), 'grouped allgather 0')
check(outs[1], torch.cat([torch.full((r + 2, 2), float(-r)) for r in range(size)]), 'grouped allgather 1')

# Broadcast from the last rank.
b = torch.full((5,), float(rank), dtype=torch.float64)
hvd.broadcast_(b, root_rank=size - 1, name='bcast')
check(b, torch.full((5,), float(size - 1), dtype=torch.float64), 'broadcast')

# Alltoall(v): rank r sends p + 1 rows of r * 100 + p to rank p.
splits = torch.tensor([p + 1 for p in range(size)], dtype=torch.int32)
x = torch.cat([torch.full((p + 1, 2), float(rank * 100 + p)) for p in range(size)])
got, received = hvd.alltoall(x, splits=splits, name='alltoall')
check(got, torch.cat([torch.full((rank + 1, 2), float(p * 100 + rank)) for p in range(size)]), 'alltoall')
check(received, torch.full((size,), rank + 1, dtype=torch.int32), 'alltoall received splits')

# Reducescatter: 2 * size + 1 rows; the first rank gets one more.
rows = 2 * size + 1
x = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * (rank + 1)
got = hvd.reducescatter(x, op=hvd.Sum, name='rs')
full = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * (size * (size + 1) // 2)
counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
start = sum(counts[:rank])
check(got, full[start:start + counts[rank]], 'reducescatter')
got = hvd.reducescatter(x.to(torch.float16), op=hvd.Average, name='rs.avg')
check(got, (full[start:start + counts[rank]] / size).to(torch.float16), 'reducescatter average float16')

# Process sets: a static-like one of the even ranks and the odd ranks, each its own communicator,
# removed (its communicator freed) and used again.
for attempt in range(2):
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
    mine = evens if rank % 2 == 0 else odds
    s = hvd.allreduce(torch.full((3,), float(rank)), op=hvd.Sum, process_set=mine, name='set.{}'.format(attempt))
    check(s, torch.full((3,), float(sum(mine.ranks))), 'process set allreduce')
    g = hvd.allgather(torch.tensor([rank]), process_set=mine, name='set.gather.{}'.format(attempt))
    check(g, torch.tensor(mine.ranks), 'process set allgather')
    hvd.barrier(process_set=mine)
    hvd.remove_process_set(evens)
    if odds is not None:
        hvd.remove_process_set(odds)

hvd.barrier()
count = sum(n for (backend, _), n in hvd.engine_counters().items() if backend == 'mpi')
if want_mpi:
    # Dozens of collectives ran; fusion may merge some, never all.
    assert count >= 50, 'only {} collectives ran through MPI'.format(count)
else:
    assert count == 0, '{} collectives ran through MPI without HOROVOD_CPU_OPERATIONS=mpi'.format(count)
os.write(1, 'OK {} mpi_collectives={}\n'.format(rank, count).encode())  # one write: MPICH interleaves
sys.exit(0)
