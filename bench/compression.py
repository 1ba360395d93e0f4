#!/usr/bin/env python3
"""Gradient compression on a shaped link: time to a target accuracy and bytes on the wire for
horovod.torch's DistributedOptimizer with no compression, fp16, PowerSGD rank 1/2/4 and the
int8 quantizer, at 2 ranks, one per network namespace, joined by a veth pair shaped to RATE
(tc tbf, both directions) as bench/netns_shaped.sh does. Needs root (ip netns, tc).

    sudo python3 bench/compression.py [--build DIR] [--rate 1gbit] [--steps 200]
                                      [--methods none,fp16,powersgd1,powersgd2,powersgd4,int8]
                                      [--target 0.7] [--out bench/results/compression.md]
    python3 bench/compression.py --smoke      # 2 ranks on loopback, 4 steps each, no table

Task: the MLP of bench/torch_e2e.py, narrowed (1024-2048-2048-10, 6.3 M parameters, 25 MB of
float32 gradients a step) on 10 Gaussian classes in 1024 dimensions, a fresh batch of 128 per
rank and step; SGD(lr 0.03, momentum 0.9); every rank runs one intra-op thread. Each rank
evaluates the same held-out 2000 samples every --eval-every steps (outside the clock): "time to
target" is the training wall time until the first evaluation at or above --target; the final
accuracy is after --steps steps. Bytes: eth0's transmitted bytes (/proc/net/dev, in each
namespace) over the training, both ranks together, divided by the steps (all traffic: payload,
TCP/IP headers, negotiation).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ['none', 'fp16', 'powersgd1', 'powersgd2', 'powersgd4', 'int8']
DIM, CLASSES, BATCH, SEPARATION = 1024, 10, 128, 0.08


# ---- the worker (one rank, inside its namespace) ---------------------------------------------

def _compression(hvd, method):
    if method == 'none':
        return hvd.Compression.none
    if method == 'fp16':
        return hvd.Compression.fp16
    if method.startswith('powersgd'):
        return hvd.PowerSGD(rank=int(method[len('powersgd'):]))
    if method == 'int8':
        return hvd.Int8Quantizer()
    raise ValueError('unknown method %r (one of %s)' % (method, ', '.join(METHODS)))


def _tx_bytes(iface):
    with open('/proc/net/dev') as f:
        for line in f:
            name, _, rest = line.partition(':')
            if name.strip() == iface:
                return int(rest.split()[8])
    return None


def worker(args):
    import torch
    import torch.nn as nn
    import horovod.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    g = torch.Generator().manual_seed(1234)
    centers = torch.randn(CLASSES, DIM, generator=g) * SEPARATION

    def batch(n, seed):
        gen = torch.Generator().manual_seed(seed)
        y = torch.randint(0, CLASSES, (n,), generator=gen)
        return centers[y] + torch.randn(n, DIM, generator=gen), y

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, CLASSES))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   compression=_compression(hvd, args.method))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    xt, yt = batch(2000, 99)
    iface = args.iface
    tx0 = _tx_bytes(iface)
    clock, reached, curve = 0.0, None, []
    for step in range(1, args.steps + 1):
        x, y = batch(BATCH, 1000003 * (hvd.rank() + 1) + step)
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        clock += time.perf_counter() - t0
        if step % args.eval_every == 0 or step == args.steps:
            with torch.no_grad():
                accuracy = (model(xt).argmax(1) == yt).float().mean().item()
            curve.append((step, round(clock, 3), round(accuracy, 4)))
            if reached is None and accuracy >= args.target:
                reached = (step, clock)
    tx = _tx_bytes(iface) - tx0 if tx0 is not None else None
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0), name='bench.weights')
    identical = bool(torch.equal(gathered[0], gathered[-1]))
    print('RESULT ' + json.dumps(dict(
        method=args.method, rank=hvd.rank(), steps=args.steps, seconds=clock,
        step_to_target=reached and reached[0], seconds_to_target=reached and reached[1],
        final_accuracy=curve[-1][2], tx_bytes=tx, identical=identical, curve=curve,
        params=sum(p.numel() for p in model.parameters()))), flush=True)
    hvd.shutdown()


# ---- the driver --------------------------------------------------------------------------------

def _sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout


class Link:
    """Two namespaces joined by a veth pair, both ends shaped to ``rate``."""

    def __init__(self, rate):
        tag = 'hvdc%d' % os.getpid()
        self.ns = [tag + 'a', tag + 'b']
        self.addr = ['10.78.%d.1' % (os.getpid() % 200 + 20), '10.78.%d.2' % (os.getpid() % 200 + 20)]
        for ns in self.ns:
            _sh('ip', 'netns', 'add', ns)
            _sh('ip', '-n', ns, 'link', 'set', 'lo', 'up')
        _sh('ip', '-n', self.ns[0], 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0',
            'netns', self.ns[1])
        for ns, addr in zip(self.ns, self.addr):
            _sh('ip', '-n', ns, 'addr', 'add', addr + '/24', 'dev', 'eth0')
            _sh('ip', '-n', ns, 'link', 'set', 'eth0', 'up')
            _sh('ip', 'netns', 'exec', ns, 'tc', 'qdisc', 'add', 'dev', 'eth0', 'root', 'tbf',
                'rate', rate, 'burst', '256kb', 'latency', '20ms')

    def close(self):
        for ns in self.ns:
            _sh('ip', 'netns', 'del', ns, check=False)


def run_method(method, args, link, rdv_exe):
    env = dict(os.environ, HOROVOD_SECRET_KEY=os.urandom(16).hex(), PYTHONUNBUFFERED='1',
               OMP_NUM_THREADS='1')
    ns0 = ['ip', 'netns', 'exec', link.ns[0]] if link else []
    bind = link.addr[0] if link else '127.0.0.1'
    rdv = subprocess.Popen(ns0 + [rdv_exe, '--bind', bind, '--seconds', '3600'],
                           stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = None
        for line in rdv.stdout:
            if line.startswith('port '):
                port = line.split()[1]
                break
        if port is None:
            raise RuntimeError('rendezvous server did not start')
        procs = []
        for rank in range(2):
            prefix = ['ip', 'netns', 'exec', link.ns[rank]] if link else []
            renv = dict(env, HOROVOD_RANK=str(rank), HOROVOD_SIZE='2', HOROVOD_LOCAL_RANK='0',
                        HOROVOD_LOCAL_SIZE='1', HOROVOD_CROSS_RANK=str(rank),
                        HOROVOD_CROSS_SIZE='2', HOROVOD_HOSTNAME='h%d' % rank,
                        HOROVOD_GLOO_RENDEZVOUS_ADDR=bind, HOROVOD_GLOO_RENDEZVOUS_PORT=port,
                        HOROVOD_GLOO_IFACE='eth0' if link else 'lo')
            cmd = prefix + ['timeout', str(args.timeout), sys.executable, os.path.abspath(__file__),
                            '--worker', '--method', method, '--steps', str(args.steps),
                            '--eval-every', str(args.eval_every), '--target', str(args.target),
                            '--iface', 'eth0' if link else 'lo']
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True, env=renv))
        results = []
        for rank, p in enumerate(procs):
            out, _ = p.communicate()
            lines = [ln for ln in out.splitlines() if ln.startswith('RESULT ')]
            if p.returncode != 0 or not lines:
                raise RuntimeError('%s rank %d failed (exit %s):\n%s' % (
                    method, rank, p.returncode, out[-4000:]))
            results.append(json.loads(lines[-1][len('RESULT '):]))
        return results
    finally:
        rdv.terminate()
        rdv.wait()


def summarize(method, results):
    r0 = results[0]
    tx = [r['tx_bytes'] for r in results]
    return dict(method=method, steps=r0['steps'], seconds=max(r['seconds'] for r in results),
                step_to_target=r0['step_to_target'],
                seconds_to_target=max((r['seconds_to_target'] or float('inf')) for r in results),
                final_accuracy=r0['final_accuracy'],
                bytes_per_step=(sum(tx) / r0['steps']) if None not in tx else None,
                identical=all(r['identical'] for r in results), curve=r0['curve'],
                params=r0['params'])


def write_table(rows, args, path, goodput_note):
    fp16 = next((r for r in rows if r['method'] == 'fp16'), None)
    none = next((r for r in rows if r['method'] == 'none'), None)
    lines = ['| method | MB on the wire / step | vs fp16 | time / step (s) | steps to %.2f | '
             'time to %.2f (s) | accuracy after %d steps | weights identical |' % (
                 args.target, args.target, args.steps),
             '|---|---|---|---|---|---|---|---|']
    for r in rows:
        mb = r['bytes_per_step'] / 1e6 if r['bytes_per_step'] is not None else float('nan')
        ratio = (fp16['bytes_per_step'] / r['bytes_per_step']
                 if fp16 and r['bytes_per_step'] else float('nan'))
        ttt = ('%.1f' % r['seconds_to_target'] if r['seconds_to_target'] != float('inf')
               else 'not reached')
        lines.append('| %s | %.2f | %.1fx | %.3f | %s | %s | %.4f | %s |' % (
            r['method'], mb, ratio, r['seconds'] / r['steps'],
            r['step_to_target'] or '-', ttt, r['final_accuracy'],
            'yes' if r['identical'] else 'NO'))
    text = '\n'.join(lines) + '\n'
    if path:
        with open(path, 'w') as f:
            f.write('# Gradient compression on a shaped link (bench/compression.py)\n\n')
            f.write('Command: `%s`\n\n%s\n\n' % (' '.join(['python3', 'bench/compression.py'] +
                                                           sys.argv[1:]), goodput_note))
            f.write(text)
            if none:
                f.write('\nAccuracy loss vs no compression after %d steps (points): %s\n' % (
                    args.steps, ', '.join('%s %+.2f' % (
                        r['method'], 100 * (none['final_accuracy'] - r['final_accuracy']))
                        for r in rows if r is not none)))
            f.write('\nAccuracy curves (step, training seconds, accuracy):\n\n')
            for r in rows:
                f.write('- %s: %s\n' % (r['method'], ' '.join(
                    '(%d, %.1f, %.3f)' % tuple(c) for c in r['curve'])))
    return text


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('# matplotlib not available: no plot')
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        steps, secs, acc = zip(*r['curve'])
        ax1.plot(secs, acc, label=r['method'])
    ax1.set_xlabel('training seconds')
    ax1.set_ylabel('held-out accuracy')
    ax1.legend()
    ax1.set_title('accuracy over time, 2 ranks, shaped link')
    names = [r['method'] for r in rows]
    ax2.bar(names, [r['bytes_per_step'] / 1e6 for r in rows])
    ax2.set_yscale('log')
    ax2.set_ylabel('MB on the wire per step (both ranks)')
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print('# plot written to %s' % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    ap.add_argument('--method', default='none', help=argparse.SUPPRESS)
    ap.add_argument('--iface', default='eth0', help=argparse.SUPPRESS)
    ap.add_argument('--methods', default=','.join(METHODS))
    ap.add_argument('--steps', type=int, default=200)
    ap.add_argument('--eval-every', type=int, default=10)
    ap.add_argument('--target', type=float, default=0.7)
    ap.add_argument('--rate', default='1gbit')
    ap.add_argument('--build', default=os.environ.get('HVD_BUILD_DIR', 'build'))
    ap.add_argument('--timeout', type=int, default=1800, help='seconds per rank and method')
    ap.add_argument('--out', default=None, help='markdown table (and a .png beside it)')
    ap.add_argument('--smoke', action='store_true', help='loopback, 4 steps, no shaping')
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    build = args.build if os.path.isabs(args.build) else os.path.join(ROOT, args.build)
    rdv = os.path.join(build, 'bench', 'rendezvous_server')
    if not os.access(rdv, os.X_OK):
        sys.exit('compression.py: %s not built (cmake --build %s --target rendezvous_server)'
                 % (rdv, build))
    methods = args.methods.split(',')
    for m in methods:
        if m not in METHODS:
            sys.exit('compression.py: unknown method %r (one of %s)' % (m, ', '.join(METHODS)))
    link = None
    if args.smoke:
        args.steps, args.eval_every = 4, 2
    else:
        if os.geteuid() != 0 or shutil.which('tc') is None:
            sys.exit('compression.py: needs root and tc (ip netns, tc tbf); --smoke runs '
                     'without them')
        link = Link(args.rate)
    note = ('2 ranks, one per network namespace, veth pair shaped to %s each way (tc tbf).'
            % args.rate if link else '2 ranks on loopback, unshaped (smoke).')
    rows = []
    try:
        for m in methods:
            started = time.time()
            rows.append(summarize(m, run_method(m, args, link, rdv)))
            print('# %s done in %.0f s: %s' % (m, time.time() - started,
                                               json.dumps({k: v for k, v in rows[-1].items()
                                                           if k != 'curve'})), flush=True)
    finally:
        if link:
            link.close()
    print(write_table(rows, args, None if args.smoke else args.out, note))
    if args.out and not args.smoke:
        plot(rows, os.path.splitext(args.out)[0] + '.png')
    bad = [r['method'] for r in rows if not r['identical']]
    if bad:
        sys.exit('weights differ across ranks: %s' % ', '.join(bad))


if __name__ == '__main__':
    main()
