#!/usr/bin/env python3
"""Launch latency: time from starting the launcher to the first allreduce completed on every
rank, at -np 4 on this machine, median of several runs; horovodrun beside torchrun.

Variants (each skipped if what it needs is missing):
  hvd-cpp       horovodrun -np N horovodrun_allreduce_check   (C++: hvd::init + one allreduce)
  hvd-torch     horovodrun -np N python <horovod.torch init + allreduce>
  torchrun      torchrun --standalone --nproc_per_node N python <gloo init_process_group + all_reduce>
  hvd-true      horovodrun -np N true                          (launcher start + teardown only)
  torchrun-true torchrun --standalone --nproc_per_node N --no-python true

"first allreduce" is the moment the N-th rank printed its completion line (read from the
launcher's output); "exit" is when the launcher exited.

Usage: bench/launch_latency.py [--np 4] [--runs 7] [--horovodrun PATH] [--check PATH]
       [--pythonpath DIR]   (where `import horovod.torch` finds a built horovod._core)
"""

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HVD_TORCH = '''
import torch, horovod.torch as hvd
hvd.init()
hvd.allreduce(torch.ones(1024), name='first')
print('allreduce done', flush=True)
hvd.shutdown()
'''

TORCH_GLOO = '''
import torch, torch.distributed as dist
dist.init_process_group('gloo')
t = torch.ones(1024)
dist.all_reduce(t)
print('allreduce done', flush=True)
dist.destroy_process_group()
'''


def newest(pattern):
    found = [p for p in glob.glob(pattern) if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


def time_once(cmd, marker, np_, env, timeout=120):
    """Returns (seconds to the np-th marker line or None, seconds to exit)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                            errors='replace')
    seen = 0
    first = None
    deadline = start + timeout
    try:
        for line in proc.stdout:
            if marker and marker in line:
                seen += line.count(marker)  # lines of processes sharing one pipe may run together
                if seen >= np_ and first is None:
                    first = time.perf_counter() - start
            if time.perf_counter() > deadline:
                raise subprocess.TimeoutExpired(cmd, timeout)
        proc.wait(timeout=max(1, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    total = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError('{} exited {}'.format(' '.join(cmd), proc.returncode))
    if marker and first is None:
        raise RuntimeError('{}: saw {} of {} completion lines'.format(' '.join(cmd), seen, np_))
    return first, total


def works(cmd, env):
    try:
        return subprocess.run(cmd, env=env, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--np', type=int, default=4)
    parser.add_argument('--runs', type=int, default=7)
    parser.add_argument('--horovodrun', default=os.environ.get('HOROVODRUN') or
                        newest(os.path.join(ROOT, 'build*', 'launcher', 'horovodrun')) or shutil.which('horovodrun'))
    parser.add_argument('--check', default=None, help='horovodrun_allreduce_check (default: next to horovodrun)')
    parser.add_argument('--pythonpath', default=os.environ.get('HOROVOD_BENCH_PYTHONPATH', ''),
                        help='prepended to PYTHONPATH for the hvd-torch variant')
    args = parser.parse_args()
    np_ = args.np
    env = dict(os.environ)
    if not args.horovodrun:
        sys.exit('horovodrun not found (build it or pass --horovodrun)')
    check = args.check or os.path.join(os.path.dirname(args.horovodrun), 'horovodrun_allreduce_check')

    tmp = tempfile.mkdtemp(prefix='launch-latency-')
    hvd_script = os.path.join(tmp, 'hvd_torch.py')
    torch_script = os.path.join(tmp, 'torch_gloo.py')
    with open(hvd_script, 'w') as f:
        f.write(HVD_TORCH)
    with open(torch_script, 'w') as f:
        f.write(TORCH_GLOO)
    hvd_env = dict(env)
    hvd_env['PYTHONPATH'] = os.pathsep.join(p for p in (args.pythonpath, os.path.join(ROOT, 'python'),
                                                        env.get('PYTHONPATH', '')) if p)
    torchrun = shutil.which('torchrun')

    variants = []
    if os.access(check, os.X_OK):
        variants.append(('hvd-cpp', [args.horovodrun, '-np', str(np_), check], 'allreduce ok', env))
    if works([sys.executable, '-c', 'import torch, horovod.torch as hvd; hvd.init'], hvd_env):
        variants.append(('hvd-torch', [args.horovodrun, '-np', str(np_), sys.executable, hvd_script],
                         'allreduce done', hvd_env))
    if torchrun:
        variants.append(('torchrun', [torchrun, '--standalone', '--nproc_per_node', str(np_), torch_script],
                         'allreduce done', env))
    variants.append(('hvd-true', [args.horovodrun, '-np', str(np_), 'true'], None, env))
    if torchrun:
        variants.append(('torchrun-true', [torchrun, '--standalone', '--nproc_per_node', str(np_), '--no-python',
                                           'true'], None, env))

    print('launch latency, -np {}, {} runs each (median [min..max], ms); {} CPUs'.format(
        np_, args.runs, os.cpu_count()))
    print('horovodrun: {}'.format(args.horovodrun))
    print('{:<14} {:>30} {:>30}'.format('variant', 'to first allreduce', 'to launcher exit'))
    # Rounds interleave the variants, so a change in machine load hits all of them alike.
    samples = {name: [] for name, _, _, _ in variants}
    failed = {}
    for round_ in range(args.runs + 1):  # round 0 warms up page cache and bytecode
        for name, cmd, marker, venv in variants:
            if name in failed:
                continue
            try:
                result = time_once(cmd, marker, np_, venv)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failed[name] = e
                continue
            if round_ > 0:
                samples[name].append(result)

    def fmt(values):
        if not values or values[0] is None:
            return '-'
        ms = [v * 1000 for v in values]
        return '{:.0f} [{:.0f}..{:.0f}]'.format(statistics.median(ms), min(ms), max(ms))

    for name, _, _, _ in variants:
        if name in failed:
            print('{:<14} failed: {}'.format(name, failed[name]))
        else:
            print('{:<14} {:>30} {:>30}'.format(name, fmt([s[0] for s in samples[name]]),
                                                fmt([s[1] for s in samples[name]])))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
