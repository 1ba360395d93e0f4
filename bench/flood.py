#!/usr/bin/env python3
"""Training throughput and memory under a connection flood of the rendezvous port.

    python3 bench/flood.py --reps 3 --seconds 20 --rates 0,2000,max --out bench/results/flood.md

Each run is one 2-rank job under horovodrun (bench/soak_worker.py: a small torch MLP, unpaced,
no timeline or autotune) for --seconds, with the rendezvous server on a fixed port. For a flood
rate, bench/flood_hammer.py floods that port from before the job starts until it ended (2
processes, 100 idle holders each, each other connection reset at once; `max`: as fast as they
can; 0: no flood). The runs alternate rates within each repetition.

Per run: training steps a second (the slowest rank's steps over its training time), each
process's peak resident memory and peak open descriptors (sampled every 0.1 s from /proc),
horovodrun's CPU time (what serving the flood cost the rendezvous server), and the flood's
achieved rate. Reported per rate: the medians, and the throughput and memory ratios
to the no-flood runs (the goal: within 10 %). On a small machine the flood's own processes take
CPU from the job: the hammer runs at nice 10 (--hammer-nice), and the table gives the load.
Nothing is asserted; tests/launcher/test_flood.py checks the events.
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


def one_run(args, rate):
    work = tempfile.mkdtemp(prefix='hvd-flood-')
    port = free_port()
    hammer = None
    if rate != '0':
        cmd = ['nice', '-n', str(args.hammer_nice), sys.executable, os.path.join(HERE, 'flood_hammer.py'),
               '127.0.0.1', str(port), '--seconds', str(args.seconds + 120), '--procs', '2', '--holders', '100',
               '--stop-file', os.path.join(work, 'stop'), '--started-file', os.path.join(work, 'started')]
        if rate != 'max':
            cmd += ['--rate', rate]
        # Its idle holders connect as soon as horovodrun's server listens, before any rank starts.
        hammer = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    env = dict(os.environ, SOAK_DIR=work, SOAK_STEP_RATE='100000', HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
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
    out = job.stdout.read().decode('utf-8', errors='replace')
    flood_line = ''
    if hammer:
        open(os.path.join(work, 'stop'), 'w').close()
        flood_line = hammer.communicate(timeout=120)[0].strip()
    if job.returncode != 0:
        print(out[-3000:])
        return None
    done = []
    for r in range(2):
        with open(os.path.join(work, 'done{}.json'.format(r))) as f:
            done.append(json.load(f))
    steps_per_s = min(d['steps'] / d['seconds'] for d in done)
    achieved = float(flood_line.split('(')[1].split('/s')[0]) if flood_line else 0.0
    return dict(steps_per_s=steps_per_s, peaks=peaks, achieved=achieved, load=os.getloadavg()[0],
                launcher_cpu=launcher_cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--seconds', type=float, default=20)
    ap.add_argument('--rates', default='0,2000,max', help='flood rates (connections/s), 0 = none, max = unlimited')
    ap.add_argument('--hammer-nice', type=int, default=10)
    ap.add_argument('--horovodrun', default=os.environ.get('HOROVODRUN') or 'horovodrun')
    ap.add_argument('--out', default=None)
    args = ap.parse_args()
    rates = args.rates.split(',')
    results = {r: [] for r in rates}
    for rep in range(args.reps):
        for rate in rates:
            res = one_run(args, rate)
            print('rep {} rate {}: {}'.format(rep, rate, res), flush=True)
            if res:
                results[rate].append(res)
    base = results.get('0') or []
    base_tput = statistics.median(r['steps_per_s'] for r in base) if base else None

    def med_peak(runs, name, i):
        vals = [r['peaks'][name][i] for r in runs if name in r['peaks']]
        return statistics.median(vals) if vals else 0

    lines = ['# Training under a rendezvous-port flood (2 ranks, torch MLP)', '',
             '`python3 bench/flood.py --reps {} --seconds {:g} --rates {}` on {} CPUs; the hammer at nice {}.'.format(
                 args.reps, args.seconds, args.rates, os.cpu_count(), args.hammer_nice), '',
             '| flood (asked) | achieved conn/s | runs | steps/s | vs none | rank RSS peak (MiB) | vs none | '
             'horovodrun RSS peak (MiB) | horovodrun fds peak | horovodrun CPU (s) | load |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    base_rss = med_peak(base, 'rank0', 0) if base else None
    for rate in rates:
        runs = results[rate]
        if not runs:
            lines.append('| {} | - | 0 (failed) | | | | | | | | |'.format(rate))
            continue
        tput = statistics.median(r['steps_per_s'] for r in runs)
        rss = med_peak(runs, 'rank0', 0)
        lines.append('| {} | {:.0f} | {} | {:.1f} | {} | {:.1f} | {} | {:.1f} | {:.0f} | {:.2f} | {:.1f} |'.format(
            rate, statistics.median(r['achieved'] for r in runs), len(runs), tput,
            '{:+.1f} %'.format(100 * (tput / base_tput - 1)) if base_tput else '-', rss / 1024,
            '{:+.1f} %'.format(100 * (rss / base_rss - 1)) if base_rss else '-',
            med_peak(runs, 'horovodrun', 0) / 1024, med_peak(runs, 'horovodrun', 1),
            statistics.median(r['launcher_cpu'] for r in runs), statistics.median(r['load'] for r in runs)))
    report = '\n'.join(lines) + '\n'
    print(report)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(report)
    return 0 if all(results.values()) else 1


if __name__ == '__main__':
    sys.exit(main())
