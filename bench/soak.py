#!/usr/bin/env python3
"""Soak: a long 2-rank training job under horovodrun with the timeline and autotune on, watched
for anything that grows.

    python3 bench/soak.py --minutes 60 --out bench/results/soak.md --png bench/results/soak.png
    python3 bench/soak.py --minutes 3 --interval 10 --out build/soak_ci.md     (CI's version)
    python3 bench/soak.py --cluster netns --np 3 --minutes 60 --out bench/results/soak_netns.md

`--cluster netns` runs the job across two hosts: two network namespaces with sshd each
(tests/multiproc/launcher_ssh_netns.sh sets them up; needs root), ranks 0-1 on the first and rank 2
on the second (for --np 3), started by horovodrun over ssh, so the TCP data plane between hosts and
the ssh launch path are soaked too. Every process shares this machine's /proc, so sampling is the
same as locally.

The job: bench/soak_worker.py, a small torch MLP (64-128-128-10, batch 32 per rank) with
DistributedOptimizer, paced to --step-rate steps a second, under
`horovodrun -np 2 --autotune --timeline-filename ...`. The timeline is unbounded
(HOROVOD_TIMELINE_MAX_BYTES=0) so that its growth can be measured.

Every --interval seconds it samples, for each rank and for horovodrun: resident memory (VmRSS),
open file descriptors (/proc/PID/fd), threads, and shared-memory segments held (descriptors and
mappings of memfd or /dev/shm objects); and globally the /dev/shm entries named hvd-* and the
timeline's size on disk.

Verdict, after the warm-up (--warmup-minutes): for every process and every resource, the median
of the last three samples against the median of the first three after the warm-up; growth above
--max-growth (5 %) fails, as does a job that does not finish, any rank that did not complete, or
an hvd-* entry left in /dev/shm after the job. The timeline grows by design: its rate is
reported, and its bytes per training step in the first and the second half of the run must agree
within 25 % (linear growth: a steady job writes the same per step), else the run fails.
The exit status is 1 on failure.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NETNS_SCRIPT = os.path.join(HERE, '..', 'tests', 'multiproc', 'launcher_ssh_netns.sh')
RESOURCES = ('rss_kib', 'fds', 'threads', 'shm')


def proc_sample(pid):
    """One process's resources, or None once it is gone."""
    try:
        status = {}
        with open('/proc/{}/status'.format(pid)) as f:
            for line in f:
                k, _, v = line.partition(':')
                status[k] = v.strip()
        fds = os.listdir('/proc/{}/fd'.format(pid))
        shm = set()
        for fd in fds:
            try:
                target = os.readlink('/proc/{}/fd/{}'.format(pid, fd))
            except OSError:
                continue
            if target.startswith('/memfd:') or target.startswith('/dev/shm/'):
                shm.add(target)
        with open('/proc/{}/maps'.format(pid)) as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    path = parts[5].strip()
                    if path.startswith('/memfd:') or path.startswith('/dev/shm/'):
                        shm.add(path.split(' (deleted)')[0] + '@' + parts[4])
        return dict(rss_kib=int(status['VmRSS'].split()[0]), fds=len(fds), threads=int(status['Threads']),
                    shm=len(shm))
    except (OSError, KeyError, ValueError):
        return None


def hvd_shm_entries():
    try:
        return sorted(n for n in os.listdir('/dev/shm') if n.startswith('hvd-'))
    except OSError:
        return []


def timeline_bytes(path):
    return sum(os.path.getsize(p) for p in (path, path + '.head', path + '.1') if os.path.exists(p))


def read_steps(work, np_):
    total = []
    for r in range(np_):
        try:
            with open(os.path.join(work, 'steps{}'.format(r))) as f:
                total.append(int(f.read().split()[0]))
        except (OSError, ValueError, IndexError):
            total.append(0)
    return min(total)


def growth(values):
    base = statistics.median(values[:3])
    final = statistics.median(values[-3:])
    if base == 0:
        return base, final, (0.0 if final == 0 else float('inf'))
    return base, final, (final - base) / base


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--minutes', type=float, default=60.0)
    ap.add_argument('--interval', type=float, default=None, help='seconds between samples (default: 60, '
                    'or minutes*60/18 when that is shorter)')
    ap.add_argument('--warmup-minutes', type=float, default=None,
                    help='excluded from the verdict (default: a third of the run, at most 5)')
    ap.add_argument('--np', type=int, default=2)
    ap.add_argument('--cluster', default='local', choices=['local', 'netns'],
                    help='netns: two namespace hosts over ssh (root; ranks split as evenly as possible)')
    ap.add_argument('--inside-netns', action='store_true', help=argparse.SUPPRESS)
    ap.add_argument('--step-rate', type=float, default=20.0, help='training steps a second, at most')
    ap.add_argument('--max-growth', type=float, default=0.05)
    ap.add_argument('--horovodrun', default=os.environ.get('HOROVODRUN') or shutil.which('horovodrun'))
    ap.add_argument('--out', default=None, help='markdown report (default: stdout only)')
    ap.add_argument('--png', default=None, help='plot of every resource over time (needs matplotlib)')
    args = ap.parse_args()
    if not args.horovodrun:
        sys.exit('soak: horovodrun not found (install the package or pass --horovodrun)')
    seconds = args.minutes * 60
    interval = args.interval or min(60.0, seconds / 18)
    warmup = (args.warmup_minutes * 60) if args.warmup_minutes is not None else min(300.0, seconds / 3)
    if seconds - warmup < 3 * interval:
        sys.exit('soak: --minutes leaves fewer than 3 samples after the warm-up; lengthen the run or '
                 'shorten --interval / --warmup-minutes')
    if args.cluster == 'netns' and not args.inside_netns:
        return run_inside_netns(args)

    work = tempfile.mkdtemp(prefix='hvd-soak-')
    timeline = os.path.join(work, 'timeline.json')
    env = dict(os.environ, SOAK_DIR=work, SOAK_STEP_RATE=str(args.step_rate), HOROVOD_TIMELINE_MAX_BYTES='0')
    shm_before = set(hvd_shm_entries())
    t0 = time.time()
    env['SOAK_DEADLINE'] = str(t0 + seconds)
    cmd = [args.horovodrun, '-np', str(args.np)] + netns_hosts_args(args.np) if args.inside_netns else \
        [args.horovodrun, '-np', str(args.np)]
    cmd += ['--autotune', '--autotune-log-file',
           os.path.join(work, 'autotune.csv'), '--timeline-filename', timeline,
           sys.executable, os.path.join(HERE, 'soak_worker.py')]
    log_path = os.path.join(work, 'horovodrun.log')
    log = open(log_path, 'w')
    job = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    pids = {}
    samples = []  # (t, steps, timeline bytes, {name: sample})
    next_sample = t0
    hard_deadline = t0 + seconds + 120
    while job.poll() is None and time.time() < hard_deadline:
        for r in range(args.np):
            name = 'rank{}'.format(r)
            if name not in pids and os.path.exists(os.path.join(work, 'pid{}'.format(r))):
                with open(os.path.join(work, 'pid{}'.format(r))) as f:
                    pids[name] = int(f.read())
        now = time.time()
        if now >= next_sample and len(pids) == args.np and now < t0 + seconds:
            procs = {'horovodrun': proc_sample(job.pid)}
            procs.update((n, proc_sample(p)) for n, p in pids.items())
            if all(procs.values()):
                samples.append((now - t0, read_steps(work, args.np), timeline_bytes(timeline), procs,
                                len(hvd_shm_entries())))
                print('soak: t={:.0f}s steps={} timeline={}B '.format(now - t0, samples[-1][1], samples[-1][2]) +
                      ' '.join('{}:rss={}KiB,fds={},thr={},shm={}'.format(n, s['rss_kib'], s['fds'], s['threads'],
                                                                          s['shm']) for n, s in procs.items()),
                      flush=True)
            while next_sample <= now:  # on the interval's grid, no catch-up burst after a late start
                next_sample += interval
        time.sleep(0.5)
    if job.poll() is None:
        job.kill()
        job.wait()
        failures = ['the job did not finish within 120 s after its deadline (killed)']
    else:
        failures = [] if job.returncode == 0 else ['horovodrun exited with {}'.format(job.returncode)]
    log.close()
    for r in range(args.np):
        if not os.path.exists(os.path.join(work, 'done{}.json'.format(r))):
            failures.append('rank {} did not complete'.format(r))
    left = sorted(set(hvd_shm_entries()) - shm_before)
    if left:
        failures.append('left in /dev/shm: ' + ', '.join(left))

    after = [s for s in samples if s[0] >= warmup]
    rows = []
    if len(after) < 3:
        failures.append('only {} samples after the warm-up'.format(len(after)))
    else:
        for name in ['rank{}'.format(r) for r in range(args.np)] + ['horovodrun']:
            for res in RESOURCES:
                base, final, g = growth([s[3][name][res] for s in after])
                peak = max(s[3][name][res] for s in after)
                ok = g <= args.max_growth
                rows.append((name, res, base, final, peak, g, ok))
                if not ok:
                    failures.append('{} {} grew {:+.1f}% ({} -> {})'.format(name, res, 100 * g, base, final))
    timeline_note = ''
    if len(after) >= 4:
        mid = len(after) // 2
        halves = [(after[0], after[mid]), (after[mid], after[-1])]
        per_step = []
        for a, b in halves:
            steps = b[1] - a[1]
            per_step.append((b[2] - a[2]) / steps if steps > 0 else float('nan'))
        rate = (after[-1][2] - after[0][2]) / (after[-1][0] - after[0][0])
        linear = all(p == p for p in per_step) and abs(per_step[1] - per_step[0]) <= 0.25 * per_step[0]
        timeline_note = ('timeline: {:.0f} bytes/s after the warm-up ({:.1f} MB/hour); {:.0f} bytes/step in the '
                         'first half, {:.0f} in the second: {}'.format(rate, rate * 3600 / 1e6, per_step[0],
                                                                       per_step[1],
                                                                       'linear' if linear else 'NOT linear'))
        if not linear:
            failures.append(timeline_note)
    steps_total = samples[-1][1] if samples else 0

    where = ' on two hosts (network namespaces, ssh; `{}`)'.format(' '.join(cmd[3:5])) if args.inside_netns else ''
    lines = ['# Soak: {} ranks{}, {:g} minutes, timeline and autotune on'.format(args.np, where, args.minutes), '',
             '`python3 bench/soak.py{} --np {} --minutes {:g}` (sample every {:.0f} s, warm-up {:.0f} s '
             'excluded, growth limit {:.0f} %).'.format(' --cluster netns' if args.inside_netns else '', args.np,
                                                        args.minutes, interval, warmup, 100 * args.max_growth), '',
             'Host: {} CPUs, load average at the end {}.'.format(os.cpu_count(),
                                                                 ' '.join('{:.1f}'.format(x) for x in os.getloadavg())),
             'Steps (slowest rank) at the last sample: {} ({:.1f}/s over the run).'.format(
                 steps_total, steps_total / samples[-1][0] if samples else 0.0), '',
             '| process | resource | after warm-up | at the end | peak | growth | ok |',
             '|---|---|---|---|---|---|---|']
    for name, res, base, final, peak, g, ok in rows:
        lines.append('| {} | {} | {:g} | {:g} | {:g} | {:+.2f} % | {} |'.format(name, res, base, final, peak, 100 * g,
                                                                              'yes' if ok else 'NO'))
    lines += ['', timeline_note, '', 'Samples (rss in KiB; fds / threads / shm segments):', '',
              '| t (s) | steps | timeline (bytes) | /dev/shm hvd-* | ' +
              ' | '.join(n for n in (samples[0][3] if samples else {})) + ' |',
              '|---|---|---|---|' + '---|' * (len(samples[0][3]) if samples else 0)]
    for t, steps, tl, procs, shm_global in samples:
        lines.append('| {:.0f} | {} | {} | {} | '.format(t, steps, tl, shm_global) + ' | '.join(
            '{} KiB; {} / {} / {}'.format(s['rss_kib'], s['fds'], s['threads'], s['shm']) for s in procs.values()) +
                     ' |')
    lines += ['', 'Verdict: ' + ('PASS' if not failures else 'FAIL: ' + '; '.join(failures)), '']
    report = '\n'.join(lines)
    print(report)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(report)
    if args.png and samples:
        plot(samples, warmup, args.png)
    if failures:
        print('soak: horovodrun output (last 40 lines):')
        with open(log_path) as f:
            print(''.join(f.readlines()[-40:]))
        print('soak: work directory kept: ' + work)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


def netns_hosts_args(np_):
    """horovodrun's host arguments inside launcher_ssh_netns.sh: the first host gets the larger half."""
    first = (np_ + 1) // 2
    hosts = '{}:{}'.format(os.environ['HOST_A'], first)
    if np_ > first:
        hosts += ',{}:{}'.format(os.environ['HOST_B'], np_ - first)
    return ['-H', hosts, '-i', os.path.join(os.environ['TMP'], 'id')]


def run_inside_netns(args):
    """Re-runs this script inside the two-namespace setup (which exits 77 when it cannot be made)."""
    if os.geteuid() != 0 or not shutil.which('ip') or not os.path.exists('/usr/sbin/sshd'):
        sys.exit('soak: --cluster netns needs root, ip and /usr/sbin/sshd')
    argv, skip = [], False
    for a in sys.argv[1:]:  # drop "--cluster netns" / "--cluster=netns"
        if not skip and not a.startswith('--cluster'):
            argv.append(a)
        skip = a == '--cluster'
    argv = [os.path.abspath(a) if a.endswith(('.md', '.png')) else a for a in argv]
    inner = ' '.join([sys.executable, os.path.abspath(__file__), '--inside-netns', '--horovodrun', args.horovodrun]
                     + argv)
    r = subprocess.run([NETNS_SCRIPT, args.horovodrun], env=dict(os.environ, NETNS_SHELL=inner))
    if r.returncode == 77:
        sys.exit('soak: the network namespaces could not be set up (see above)')
    return r.returncode


def plot(samples, warmup, path):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('soak: matplotlib not installed, no plot')
        return
    fig, axes = plt.subplots(1, 5, figsize=(20, 3.6))
    t = [s[0] / 60 for s in samples]
    titles = dict(rss_kib='RSS (MiB)', fds='open fds', threads='threads', shm='shm segments held')
    for ax, res in zip(axes, RESOURCES):
        for name in samples[0][3]:
            vals = [s[3][name][res] for s in samples]
            if res == 'rss_kib':
                vals = [v / 1024 for v in vals]
            ax.plot(t, vals, label=name)
        ax.set_title(titles[res])
        ax.set_ylim(bottom=0)
        ax.axvline(warmup / 60, color='grey', linestyle=':')
        ax.set_xlabel('minutes')
    axes[0].legend(fontsize=8)
    axes[4].plot(t, [s[2] / 1e6 for s in samples])
    axes[4].set_title('timeline (MB)')
    axes[4].set_xlabel('minutes')
    fig.tight_layout()
    fig.savefig(path, dpi=80)


if __name__ == '__main__':
    sys.exit(main())
