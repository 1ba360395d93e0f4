#!/usr/bin/env python3
"""Training throughput, memory and exit under a connection flood of the rendezvous port.

    python3 bench/flood.py --reps 5 --seconds 15 --rates 0,10000,max --out bench/results/flood.md

Each run is one 2-rank job under horovodrun (bench/soak_worker.py: a small torch MLP, unpaced,
no timeline or autotune) for --seconds, with the rendezvous server on a fixed port. For a flood
rate, the hammer floods that port from before the job starts until it ended (--procs processes,
100 idle holders each, every other connection reset at once; `max`: as fast as they can; 0: no
flood). The hammer is build/bench/flood_hammer (C++; 90,000+ connections a second on 2 cores)
when built, else bench/flood_hammer.py (about 50,000); --hammer chooses.

The control: on a small machine the hammer's processes and the kernel's work for each connection
take CPU from the ranks whatever port they hit. So every flood rate also runs as a "decoy" run:
the same hammer at the same rate against a standalone rendezvous server (build/bench/
rendezvous_server: the same server code) that is not the job's. The flood's own cost to the job is
then the ratio flood / decoy: what aiming it at the job's port adds (the ranks' store round
trips, horovodrun's loop). The runs rotate rates and targets within each repetition.

Per run: training steps a second (the slowest rank's steps over its training time), each
process's peak resident memory and peak open descriptors (sampled every 0.1 s from /proc),
horovodrun's CPU time (what serving the flood cost the rendezvous server), how long horovodrun
took to exit after the last rank finished, and the flood's achieved rate. Reported per rate: the
medians, and the throughput and memory ratios to the no-flood and to the decoy runs (the goal:
within 10 %). Nothing is asserted; tests/launcher/test_flood.py checks the events.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, '..', os.environ.get('BUILD_DIR', 'build'), 'bench')


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """User + system CPU time of `pid` so far, or None once it is gone."""
    try:
        with open('/proc/{}/stat'.format(pid)) as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
    except (OSError, IndexError, ValueError):
        return None


def sample(pid):
    try:
        with open('/proc/{}/status'.format(pid)) as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith('VmRSS:'))
        return rss, len(os.listdir('/proc/{}/fd'.format(pid)))
    except (OSError, StopIteration):
        return None


def hammer_command(args, port, work, rate):
    if args.hammer.endswith('.py'):
        cmd = [sys.executable, args.hammer]
    else:
        cmd = [args.hammer]
    cmd = ['nice', '-n', str(args.hammer_nice)] + cmd + [
        '127.0.0.1', str(port), '--seconds', str(args.seconds + 120), '--procs', str(args.procs), '--holders', '100',
        '--stop-file', os.path.join(work, 'stop'), '--started-file', os.path.join(work, 'started')]
    if rate != 'max':
        cmd += ['--rate', rate]
    return cmd


def start_decoy(work):
    """A standalone rendezvous server (not the job's) for the decoy runs; returns (process, port)."""
    server = subprocess.Popen([os.path.join(BUILD, 'rendezvous_server'), '--bind', '127.0.0.1', '--port', '0',
                               '--seconds', '600'], env=dict(os.environ, HOROVOD_SECRET_KEY='ab' * 16),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = server.stdout.readline().split()
    if len(line) != 2 or line[0] != 'port':
        server.kill()
        raise RuntimeError('flood: bench/rendezvous_server did not start (build it: ninja -C build rendezvous_server)')
    return server, int(line[1])


def one_run(args, rate, target):
    """One job; target 'job' floods its rendezvous port, 'decoy' a standalone server beside it."""
    work = tempfile.mkdtemp(prefix='hvd-flood-')
    port = free_port()
    hammer = decoy = None
    if rate != '0':
        aim = port
        if target == 'decoy':
            decoy, aim = start_decoy(work)
        # Its idle holders connect as soon as the server listens, before any rank starts.
        hammer = subprocess.Popen(hammer_command(args, aim, work, rate), stdout=subprocess.PIPE, text=True)
    env = dict(os.environ, SOAK_DIR=work, SOAK_STEP_RATE=str(args.step_rate), HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
               SOAK_DEADLINE=str(time.time() + args.seconds))
    job = subprocess.Popen([args.horovodrun, '-np', '2', sys.executable, os.path.join(HERE, 'soak_worker.py')],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peaks = {}
    pids = {'horovodrun': job.pid}
    launcher_cpu = 0.0
    while job.poll() is None:
        launcher_cpu = cpu_seconds(job.pid) or launcher_cpu
        for r in range(2):
            p = os.path.join(work, 'pid{}'.format(r))
            if 'rank{}'.format(r) not in pids and os.path.exists(p):
                with open(p) as f:
                    pids['rank{}'.format(r)] = int(f.read())
        for name, pid in pids.items():
            s = sample(pid)
            if s:
                old = peaks.get(name, (0, 0))
                peaks[name] = (max(old[0], s[0]), max(old[1], s[1]))
        time.sleep(0.1)
    exited = time.time()
    out = job.stdout.read().decode('utf-8', errors='replace')
    flood_line = ''
    if hammer:
        open(os.path.join(work, 'stop'), 'w').close()
        flood_line = hammer.communicate(timeout=120)[0].strip()
    if decoy:
        decoy.kill()
        decoy.wait()
    if job.returncode != 0:
        print(out[-3000:])
        return None
    done = []
    for r in range(2):
        path = os.path.join(work, 'done{}.json'.format(r))
        with open(path) as f:
            done.append(dict(json.load(f), finished=os.path.getmtime(path)))
    steps_per_s = min(d['steps'] / d['seconds'] for d in done)
    achieved = float(flood_line.split('(')[1].split('/s')[0]) if flood_line else 0.0
    return dict(steps_per_s=steps_per_s, peaks=peaks, achieved=achieved, load=os.getloadavg()[0],
                launcher_cpu=launcher_cpu, exit_after=max(0.0, exited - max(d['finished'] for d in done)))


def default_hammer():
    built = os.path.join(BUILD, 'flood_hammer')
    return os.path.abspath(built) if os.access(built, os.X_OK) else os.path.join(HERE, 'flood_hammer.py')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--seconds', type=float, default=20)
    ap.add_argument('--rates', default='0,2000,max', help='flood rates (connections/s), 0 = none, max = unlimited')
    ap.add_argument('--hammer', default=default_hammer(), help='flood_hammer binary or flood_hammer.py')
    ap.add_argument('--procs', type=int, default=4, help="the hammer's processes")
    ap.add_argument('--no-decoy', action='store_true', help='skip the decoy (control) runs')
    ap.add_argument('--hammer-nice', type=int, default=10)
    ap.add_argument('--step-rate', type=float, default=100000,
                    help='training steps a second, at most (default: unpaced); a paced job leaves the hammer CPU '
                         'for higher rates on a small machine')
    ap.add_argument('--horovodrun', default=os.environ.get('HOROVODRUN') or 'horovodrun')
    ap.add_argument('--out', default=None)
    args = ap.parse_args()
    rates = args.rates.split(',')
    kinds = [(r, 'job') for r in rates] + ([] if args.no_decoy else [(r, 'decoy') for r in rates if r != '0'])
    results = {k: [] for k in kinds}
    started = time.strftime('%Y-%m-%d %H:%M', time.gmtime())
    for rep in range(args.reps):
        for kind in kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]:  # rotate the order
            res = one_run(args, *kind)
            print('rep {} rate {} {}: {}'.format(rep, kind[0], kind[1], res), flush=True)
            if res:
                results[kind].append(res)

    def med(runs, key):
        return statistics.median(r[key] for r in runs) if runs else None

    def med_peak(runs, name, i):
        vals = [r['peaks'][name][i] for r in runs if name in r['peaks']]
        return statistics.median(vals) if vals else 0

    def ratio(a, b):
        return '{:+.1f} %'.format(100 * (a / b - 1)) if a and b else '-'

    base = results.get(('0', 'job')) or []
    lines = ['# Training under a rendezvous-port flood (2 ranks, torch MLP)', '',
             '`python3 bench/flood.py --reps {} --seconds {:g} --rates {} --procs {} --hammer-nice {} '
             '--step-rate {:g}` on {} CPUs, {} UTC; the hammer: {}.'.format(
                 args.reps, args.seconds, args.rates, args.procs, args.hammer_nice, args.step_rate, os.cpu_count(),
                 started, os.path.basename(args.hammer)), '',
             '| flood (asked) | aimed at | achieved conn/s | runs | steps/s | vs none | vs decoy | rank RSS peak (MiB) '
             '| vs none | horovodrun RSS peak (MiB) | horovodrun fds peak | horovodrun CPU (s) | exit after last rank '
             '(s) | load |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    for rate, target in kinds:
        runs = results[(rate, target)]
        if not runs:
            lines.append('| {} | {} | - | 0 (failed) | | | | | | | | | | |'.format(rate, target))
            continue
        tput = med(runs, 'steps_per_s')
        decoy = med(results.get((rate, 'decoy'), []), 'steps_per_s') if target == 'job' and rate != '0' else None
        rss = med_peak(runs, 'rank0', 0)
        lines.append('| {} | {} | {:.0f} | {} | {:.1f} | {} | {} | {:.1f} | {} | {:.1f} | {:.0f} | {:.2f} | {:.2f} | '
                     '{:.1f} |'.format(rate, 'the job' if target == 'job' else 'a decoy', med(runs, 'achieved'),
                                       len(runs), tput, ratio(tput, med(base, 'steps_per_s')), ratio(tput, decoy),
                                       rss / 1024, ratio(rss, med_peak(base, 'rank0', 0)),
                                       med_peak(runs, 'horovodrun', 0) / 1024, med_peak(runs, 'horovodrun', 1),
                                       med(runs, 'launcher_cpu'), med(runs, 'exit_after'), med(runs, 'load')))
    report = '\n'.join(lines) + '\n'
    print(report)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(report)
    return 0 if all(results.values()) else 1


if __name__ == '__main__':
    sys.exit(main())
