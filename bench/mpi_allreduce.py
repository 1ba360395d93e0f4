#!/usr/bin/env python3
"""Allreduce bus bandwidth of one job started several ways, beside Open MPI's own MPI_Allreduce,
and the time from launch to the first allreduce under mpirun and under horovodrun.

    python3 bench/mpi_allreduce.py [--np 2] [--rounds 3] [--reps 5] [--launch-np 4]
                                   [--out bench/results/mpi_allreduce_np2.md]

Columns (float32 sum, in place, 64 KiB to 256 MiB):
  mpirun          horovod.torch allreduce_ under plain `mpirun.openmpi -np N` (no horovodrun:
                  the job rendezvouses through MPI, data over Horovod's shm/tcp transports)
  horovodrun      the same script under `horovodrun -np N`
  mpirun+mpi      the same script under mpirun with HOROVOD_CPU_OPERATIONS=mpi: the MPI data
                  plane, every allreduce an MPI_Allreduce through Horovod's MPI plugin
  MPI_Allreduce   mpi4py's comm.Allreduce(IN_PLACE) on a numpy buffer under the same mpirun:
                  Open MPI's own collective (its defaults: vader shared memory, tuned component)
busbw = bytes / time * 2 (N-1) / N (nccl-tests' convention). Within a job each size is timed as
the median over --reps repetitions of a timed loop (rank 0's clock, after a barrier). The four
jobs run one after the other in each of --rounds rounds (interleaved, so that the machine's load
weighs on all alike); a cell is the median over rounds, a ratio the median of the per-round
ratios. Launch to first allreduce: wall time from starting `mpirun -np M` / `horovodrun -np M`
(M = --launch-np) to rank 0 returning from its first allreduce (python, torch and horovod
imports included), median over rounds, interleaved too.
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
# --sizes (bytes, comma-separated) reaches the workers through the environment.
if os.environ.get('HVD_BENCH_SIZES'):
    SIZES = [int(v) for v in os.environ['HVD_BENCH_SIZES'].split(',')]


def loop_count(nbytes):
    return max(2, min(200, (64 << 20) // nbytes))


def first_allreduce():
    import torch
    import horovod.torch as hvd
    hvd.init()
    hvd.allreduce(torch.ones(1), op=hvd.Sum, name='first')
    if hvd.rank() == 0:
        print('RESULT ' + json.dumps({'done': time.time()}), flush=True)


def paired(reps):
    """One job, HOROVOD_CPU_OPERATIONS=mpi: for each size and repetition, a timed loop of Horovod's
    allreduce_ (the MPI data plane) right after one of mpi4py's Allreduce on the same processes;
    prints the median busbw of each and the median of the per-repetition ratios."""
    import numpy as np
    import torch
    from mpi4py import MPI
    import horovod.torch as hvd
    comm = MPI.COMM_WORLD
    hvd.init(comm=comm)
    rank, size = hvd.rank(), hvd.size()
    factor = 2.0 * (size - 1) / size
    out = {}
    for nbytes in SIZES:
        t = torch.zeros(nbytes // 4, dtype=torch.float32)
        buf = np.zeros(nbytes // 4, dtype=np.float32)
        name = 'p%d' % nbytes
        hvd.allreduce_(t, op=hvd.Sum, name=name)
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        n = loop_count(nbytes)
        hvd_bw, mpi_bw, ratios = [], [], []
        for _ in range(reps):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n):
                hvd.allreduce_(t, op=hvd.Sum, name=name)
            a = nbytes / ((time.perf_counter() - start) / n) * factor / 1e9
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n):
                comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            b = nbytes / ((time.perf_counter() - start) / n) * factor / 1e9
            hvd_bw.append(a)
            mpi_bw.append(b)
            ratios.append(a / b)
        out[str(nbytes)] = [statistics.median(hvd_bw), statistics.median(mpi_bw), statistics.median(ratios)]
    if rank == 0:
        print('RESULT ' + json.dumps({'paired': out, 'mpi_collectives': mpi_collective_count(hvd)}), flush=True)


def mpi_collective_count(hvd):
    """Collectives the MPI data plane ran since init (hvd.engine_counters())."""
    return sum(n for (backend, _), n in hvd.engine_counters().items() if backend == 'mpi')


def worker(kind, reps):
    results = {}
    if kind == 'first':
        first_allreduce()
        return
    if kind == 'paired':
        paired(reps)
        return
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
        mpi_collectives = mpi_collective_count(hvd)
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
        mpi_collectives = -1
    if rank == 0:
        factor = 2.0 * (size - 1) / size
        busbw = {str(k): k / v * factor / 1e9 for k, v in results.items()}
        print('RESULT ' + json.dumps({'busbw': busbw, 'mpi_enabled': mpi, 'mpi_collectives': mpi_collectives}),
              flush=True)


def mpirun_cmd(np_):
    cmd = [shutil.which('mpirun.openmpi') or 'mpirun', '-np', str(np_), '--oversubscribe', '--bind-to', 'none']
    if os.geteuid() == 0:
        cmd.append('--allow-run-as-root')
    return cmd


def run(cmd, timeout=900, env=None):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=env)
    for line in proc.stdout.splitlines():
        if 'RESULT ' in line:
            return json.loads(line.split('RESULT ', 1)[1])
    raise RuntimeError('no result from {} (exit {}):\n{}'.format(' '.join(cmd), proc.returncode, proc.stdout[-4000:]))


def human(nbytes):
    return '%d KiB' % (nbytes >> 10) if nbytes < (1 << 20) else '%d MiB' % (nbytes >> 20)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(('HOROVOD_', 'OMPI_', 'PMI_'))}
    env.update(extra)
    return env


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--np', type=int, default=2)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--reps', type=int, default=5)
    parser.add_argument('--launch-np', type=int, default=4)
    parser.add_argument('--out', default=None)
    parser.add_argument('--worker', choices=['hvd', 'mpi4py', 'first', 'paired'])
    parser.add_argument('--sizes', default=None, help='comma-separated byte counts (default: 64 KiB-256 MiB)')
    parser.add_argument('--paired-only', action='store_true',
                        help='only the paired MPI data plane / MPI_Allreduce job (its table is printed)')
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.reps)
        return
    if args.sizes:
        os.environ['HVD_BENCH_SIZES'] = args.sizes
        global SIZES
        SIZES = [int(v) for v in args.sizes.split(',')]
    me = [sys.executable, os.path.abspath(__file__), '--reps', str(args.reps), '--worker']
    hvdrun = os.environ.get('HOROVODRUN') or shutil.which('horovodrun')
    jobs = {
        'mpirun': (mpirun_cmd(args.np) + me + ['hvd'], clean_env()),
        'horovodrun': ([hvdrun, '-np', str(args.np)] + me + ['hvd'], clean_env()),
        'mpirun+mpi': (mpirun_cmd(args.np) + ['-x', 'HOROVOD_CPU_OPERATIONS'] + me + ['hvd'],
                       clean_env(HOROVOD_CPU_OPERATIONS='mpi')),
        'MPI_Allreduce': (mpirun_cmd(args.np) + me + ['mpi4py'], clean_env()),
    }
    launches = {
        'mpirun': (mpirun_cmd(args.launch_np) + me + ['first'], clean_env()),
        'horovodrun': ([hvdrun, '-np', str(args.launch_np)] + me + ['first'], clean_env()),
    }
    paired_job = (mpirun_cmd(args.np) + ['-x', 'HOROVOD_CPU_OPERATIONS'] + me + ['paired'],
                  clean_env(HOROVOD_CPU_OPERATIONS='mpi'))
    load_before = ' '.join('%.1f' % x for x in os.getloadavg())
    pair = run(*paired_job[:1], env=paired_job[1])
    assert pair['mpi_collectives'] > 0, pair
    paired_lines = ['## MPI data plane against MPI_Allreduce, alternating in one job', '',
                    'Same processes (`mpirun -np {}`, `HOROVOD_CPU_OPERATIONS=mpi`, `hvd.init(comm=MPI.COMM_WORLD)`): '
                    'for each size and repetition a timed loop of `hvd.allreduce_` then one of mpi4py\'s '
                    '`Allreduce(IN_PLACE)`; medians over {} repetitions, the ratio the median of the '
                    'per-repetition ratios. Load average at start: {}.'.format(args.np, args.reps, load_before), '',
                    '| size | MPI data plane (GB/s) | MPI_Allreduce (GB/s) | ratio |', '|---|---|---|---|']
    for nbytes in SIZES:
        a, b, r = pair['paired'][str(nbytes)]
        paired_lines.append('| {} | {:.2f} | {:.2f} | {:.2f}x |'.format(human(nbytes), a, b, r))
    if args.paired_only:
        print('\n'.join(paired_lines))
        return
    rounds = []
    launch_rounds = []
    for _ in range(args.rounds):
        got = {}
        for name, (cmd, env) in jobs.items():
            got[name] = run(cmd, env=env)
        assert got['mpirun']['mpi_enabled'] and got['mpirun']['mpi_collectives'] == 0, got['mpirun']
        assert got['mpirun+mpi']['mpi_collectives'] > 0, 'the MPI data plane did not run: {}'.format(got['mpirun+mpi'])
        rounds.append(got)
        times = {}
        for name, (cmd, env) in launches.items():
            start = time.time()
            times[name] = run(cmd, env=env)['done'] - start
        launch_rounds.append(times)
    load_after = ' '.join('%.1f' % x for x in os.getloadavg())

    def cell(name, nbytes):
        return statistics.median(r[name]['busbw'][str(nbytes)] for r in rounds)

    def ratio(a, b, nbytes):
        return statistics.median(r[a]['busbw'][str(nbytes)] / r[b]['busbw'][str(nbytes)] for r in rounds)

    lines = ['# Allreduce busbw (GB/s), {} ranks on one host'.format(args.np), '',
             'Command: `python3 bench/mpi_allreduce.py --np {} --rounds {} --reps {} --launch-np {}`; {} UTC; '
             'load average before: {}, after: {}.'.format(args.np, args.rounds, args.reps, args.launch_np,
                                                          time.strftime('%Y-%m-%d %H:%M', time.gmtime()),
                                                          load_before, load_after),
             '', '| size | mpirun | horovodrun | mpirun+mpi (MPI data plane) | Open MPI MPI_Allreduce '
             '| mpirun / horovodrun | mpirun+mpi / MPI_Allreduce | mpirun / MPI_Allreduce |',
             '|---|---|---|---|---|---|---|---|']
    for nbytes in SIZES:
        lines.append('| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f}x | {:.2f}x | {:.2f}x |'.format(
            human(nbytes), cell('mpirun', nbytes), cell('horovodrun', nbytes), cell('mpirun+mpi', nbytes),
            cell('MPI_Allreduce', nbytes), ratio('mpirun', 'horovodrun', nbytes),
            ratio('mpirun+mpi', 'MPI_Allreduce', nbytes), ratio('mpirun', 'MPI_Allreduce', nbytes)))
    lines += ['', '## Launch to first allreduce, {} ranks'.format(args.launch_np), '',
              '| launcher | median (s) | every round (s) |', '|---|---|---|']
    for name in launches:
        values = [r[name] for r in launch_rounds]
        lines.append('| {} | {:.2f} | {} |'.format(name, statistics.median(values),
                                                   ', '.join('%.2f' % v for v in values)))
    lines += [''] + paired_lines
    text = '\n'.join(lines) + '\n'
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text)


if __name__ == '__main__':
    main()
