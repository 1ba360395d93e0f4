#!/usr/bin/env python3
"""Allreduce bus bandwidth of one job started three ways, beside Open MPI's own MPI_Allreduce.

    python3 bench/mpi_allreduce.py [--np 2] [--reps 5] [--out bench/results/mpi_allreduce_np2.md]

Rows (float32 sum, in place, 64 KiB to 256 MiB):
  mpirun          horovod.torch allreduce_ under plain `mpirun.openmpi -np N` (no horovodrun:
                  the job rendezvouses through MPI, data over Horovod's shm/tcp transports)
  horovodrun      the same script under `horovodrun -np N`
  MPI_Allreduce   mpi4py's comm.Allreduce(IN_PLACE) on a numpy buffer under the same mpirun:
                  Open MPI's own collective (its defaults: vader shared memory, tuned component)
busbw = bytes / time * 2 (N-1) / N (nccl-tests' convention). Each cell is the median over --reps
repetitions of a timed loop (rank 0's clock, after a barrier). Workers run one at a time; judge
the ratios, the machine is shared.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def loop_count(nbytes):
    return max(2, min(200, (64 << 20) // nbytes))


def worker(kind, reps):
    results = {}
    if kind == 'hvd':
        import torch
        import horovod.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        barrier = hvd.barrier
        for nbytes in SIZES:
            t = torch.zeros(nbytes // 4, dtype=torch.float32)
            name = 'b%d' % nbytes
            hvd.allreduce_(t, op=hvd.Sum, name=name)  # warm-up (negotiation, cache, buffers)
            times = []
            for _ in range(reps):
                n = loop_count(nbytes)
                barrier()
                start = time.perf_counter()
                for _ in range(n):
                    hvd.allreduce_(t, op=hvd.Sum, name=name)
                times.append((time.perf_counter() - start) / n)
            results[nbytes] = statistics.median(times)
        mpi = hvd.mpi_enabled()
    else:
        import numpy as np
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        for nbytes in SIZES:
            buf = np.zeros(nbytes // 4, dtype=np.float32)
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            times = []
            for _ in range(reps):
                n = loop_count(nbytes)
                comm.Barrier()
                start = time.perf_counter()
                for _ in range(n):
                    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
                times.append((time.perf_counter() - start) / n)
            results[nbytes] = statistics.median(times)
        mpi = True
    if rank == 0:
        factor = 2.0 * (size - 1) / size
        busbw = {str(k): k / v * factor / 1e9 for k, v in results.items()}
        print('RESULT ' + json.dumps({'busbw': busbw, 'mpi_enabled': mpi}), flush=True)


def mpirun_cmd(np_):
    cmd = [shutil.which('mpirun.openmpi') or 'mpirun', '-np', str(np_), '--oversubscribe', '--bind-to', 'none']
    if os.geteuid() == 0:
        cmd.append('--allow-run-as-root')
    return cmd


def run(cmd, timeout=900):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if 'RESULT ' in line:
            return json.loads(line.split('RESULT ', 1)[1])
    raise RuntimeError('no result from {} (exit {}):\n{}'.format(' '.join(cmd), proc.returncode, proc.stdout[-4000:]))


def human(nbytes):
    return '%d KiB' % (nbytes >> 10) if nbytes < (1 << 20) else '%d MiB' % (nbytes >> 20)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--np', type=int, default=2)
    parser.add_argument('--reps', type=int, default=5)
    parser.add_argument('--out', default=None)
    parser.add_argument('--worker', choices=['hvd', 'mpi4py'])
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.reps)
        return
    me = [sys.executable, os.path.abspath(__file__), '--reps', str(args.reps), '--worker']
    rows = {}
    rows['mpirun'] = run(mpirun_cmd(args.np) + me + ['hvd'])
    assert rows['mpirun']['mpi_enabled'], 'the mpirun job did not rendezvous through MPI'
    rows['horovodrun'] = run([shutil.which('horovodrun'), '-np', str(args.np)] + me + ['hvd'])
    rows['MPI_Allreduce'] = run(mpirun_cmd(args.np) + me + ['mpi4py'])
    lines = ['# Allreduce busbw (GB/s), {} ranks on one host'.format(args.np), '',
             'Command: `python3 bench/mpi_allreduce.py --np {} --reps {}`; {} UTC; load average before: {}.'.format(
                 args.np, args.reps, time.strftime('%Y-%m-%d %H:%M', time.gmtime()),
                 ' '.join('%.1f' % x for x in os.getloadavg())),
             '', '| size | mpirun (Horovod) | horovodrun (Horovod) | Open MPI MPI_Allreduce | mpirun / horovodrun | mpirun / MPI_Allreduce |',
             '|---|---|---|---|---|---|']
    for nbytes in SIZES:
        a, b, c = (rows[k]['busbw'][str(nbytes)] for k in ('mpirun', 'horovodrun', 'MPI_Allreduce'))
        lines.append('| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f}x | {:.2f}x |'.format(human(nbytes), a, b, c, a / b, a / c))
    text = '\n'.join(lines) + '\n'
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text)


if __name__ == '__main__':
    main()
