#!/usr/bin/env python3
"""horovod.tensorflow beside horovod.torch on the same ranks, in one process each (both adapters
drive the same core), so the ratios compare the adapters and nothing else:

- allreduce bus bandwidth, float32, 64 KiB to 64 MiB: ``hvd.allreduce`` on a TensorFlow tensor,
  eagerly and as 10 allreduces inside one ``tf.function`` (the per-op cost without TensorFlow's
  eager dispatch), against ``hvd.allreduce`` on a torch tensor (goal: TF >= 0.9x torch);
- the cost of a 100-gradient training step: a ``tf.function`` step with
  ``hvd.DistributedGradientTape`` against the same step in torch with
  ``hvd.DistributedOptimizer`` (goal: TF <= 1.2x torch), and each framework's step without any
  communication (what the framework itself costs);
- small-op latency, 4 KiB to 1 MiB: an eager ``hvd.allreduce`` on a TensorFlow tensor against the
  same on a torch tensor (goal: TF >= 0.9x torch) and against TensorFlow's own eager dispatch
  floor: an eager ``tf.identity`` of the same tensor followed by torch's allreduce, timed as one
  loop. TF's allreduce cannot cost less than torch's allreduce plus what TensorFlow takes to
  dispatch any eager op;
- how TensorFlow ops reach the core: the same measurements with
  ``HOROVOD_TENSORFLOW_OPS=kernels`` (Horovod's kernel library, whose kernels return their
  thread while the collective runs), ``kernels-sync`` (the same library with
  ``HOROVOD_TF_SYNC_KERNELS=1``: kernels wait for their collective, the fallback) and
  ``py_function``.

    python3 bench/tf_ops.py --np 2 --reps 5          # prints a markdown table
    python3 bench/tf_ops.py --smoke                  # one short pass, no table
    python3 bench/tf_ops.py --latency-only --reps 5  # only the small-op latency table (kernels)

Medians over repetitions; systems interleave within each repetition, and the three ways run
one after the other ``--rounds`` times (medians over rounds), so slow phases of a noisy machine
hit them alike.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
SMALL_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]


# ---- worker (runs on every rank) -------------------------------------------------------------------

def _timeit(fn, iters):
    fn()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) / iters


def worker(reps, smoke, latency_only=False):
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    import tensorflow as tf
    import torch
    import horovod.tensorflow as hvd_tf
    import horovod.torch as hvd_torch
    from horovod.tensorflow import _execute

    tf.config.threading.set_intra_op_parallelism_threads(1)
    torch.set_num_threads(1)
    hvd_tf.init()
    n = hvd_tf.size()
    results = {'backend': _execute.backend_name, 'allreduce': {}, 'step': {}}
    sizes = [] if latency_only else SIZES[:2] if smoke else SIZES

    for nbytes in sizes:
        elems = nbytes // 4
        xt = tf.random.normal([elems])
        xp = torch.randn(elems)
        iters = 2 if smoke else max(3, min(200, (64 << 20) // nbytes * 2))
        per_call = 10

        @tf.function
        def ten_allreduces(x):
            for i in range(per_call):
                x = hvd_tf.allreduce(x, op=hvd_tf.Average, name='tfg%d' % i)
            return x

        tf_times, graph_times, torch_times = [], [], []
        for _ in range(1 if smoke else reps):
            tf_times.append(_timeit(lambda: hvd_tf.allreduce(xt, op=hvd_tf.Sum, name='tf'), iters))
            graph_times.append(_timeit(lambda: ten_allreduces(xt), max(1, iters // per_call))
                               / per_call)
            torch_times.append(_timeit(lambda: hvd_torch.allreduce(xp, op=hvd_torch.Sum,
                                                                   name='pt'), iters))
        factor = 2 * (n - 1) / n * nbytes / 1e9
        results['allreduce'][nbytes] = (factor / statistics.median(tf_times),
                                        factor / statistics.median(graph_times),
                                        factor / statistics.median(torch_times))

    # Small-op latency: each repetition times the four calls one after the other, per size.
    results['latency'] = {}
    for nbytes in SMALL_SIZES[:2] if smoke else SMALL_SIZES:
        xt = tf.random.normal([nbytes // 4])
        xp = torch.randn(nbytes // 4)
        iters = 5 if smoke else max(50, min(2000, (16 << 20) // nbytes))
        calls = {'tf': lambda: hvd_tf.allreduce(xt, op=hvd_tf.Sum, name='tfs'),
                 'torch': lambda: hvd_torch.allreduce(xp, op=hvd_torch.Sum, name='pts'),
                 'identity': lambda: tf.identity(xt),
                 # The floor, measured: TensorFlow's dispatch of one eager op, then torch's
                 # allreduce, in one loop (both ranks' dispatch costs fall in each collective's wait).
                 'floor': lambda: (tf.identity(xt), hvd_torch.allreduce(xp, op=hvd_torch.Sum, name='pts'))}
        times = {k: [] for k in calls}
        for _ in range(1 if smoke else 3 * reps):
            for k, fn in calls.items():
                times[k].append(_timeit(fn, iters))
        results['latency'][nbytes] = {k: statistics.median(v) for k, v in times.items()}

    if latency_only:
        if hvd_tf.rank() == 0:
            print('RESULT ' + json.dumps(results), flush=True)
        return

    # A 100-gradient step: 100 weight tensors of 4096 floats, a loss touching each.
    count, width = 100, 4096
    tf_vars = [tf.Variable(tf.random.normal([width])) for _ in range(count)]
    tf_opt = tf.keras.optimizers.SGD(0.01)
    data_tf = tf.random.normal([width])

    def tf_step_fn(communicate):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.add_n([tf.reduce_sum(v * data_tf) ** 2 for v in tf_vars])
            if communicate:
                tape = hvd_tf.DistributedGradientTape(tape)
            grads = tape.gradient(loss, tf_vars)
            tf_opt.apply_gradients(zip(grads, tf_vars))
            return loss
        return step

    data_pt = torch.randn(width)

    def pt_step_fn(communicate):
        # Parameters of its own: DistributedOptimizer hooks every gradient of its parameters.
        params = [torch.nn.Parameter(torch.randn(width)) for _ in range(count)]
        optimizer = torch.optim.SGD(params, lr=0.01)
        if communicate:
            optimizer = hvd_torch.DistributedOptimizer(
                optimizer, named_parameters=[('p%d' % i, p) for i, p in enumerate(params)])

        def step():
            optimizer.zero_grad()
            loss = sum((p * data_pt).sum() ** 2 for p in params)
            loss.backward()
            optimizer.step()
        return step

    steps = {'tf': tf_step_fn(True), 'tf-nocomm': tf_step_fn(False),
             'torch': pt_step_fn(True), 'torch-nocomm': pt_step_fn(False)}
    iters = 2 if smoke else 30
    times = {k: [] for k in steps}
    for _ in range(1 if smoke else reps):
        for k, fn in steps.items():
            times[k].append(_timeit(fn, iters))
    results['step'] = {k: statistics.median(v) for k, v in times.items()}
    if hvd_tf.rank() == 0:
        print('RESULT ' + json.dumps(results), flush=True)


# ---- driver --------------------------------------------------------------------------------------

BACKENDS = ('kernels', 'kernels-sync', 'py_function')


def run(np_, reps, smoke, backend, horovodrun, latency_only=False):
    env = dict(os.environ, HOROVOD_TENSORFLOW_OPS=backend.replace('-sync', ''),
               TF_CPP_MIN_LOG_LEVEL='3')
    if backend == 'kernels-sync':
        env['HOROVOD_TF_SYNC_KERNELS'] = '1'
    cmd = [horovodrun, '-np', str(np_), sys.executable, os.path.abspath(__file__), '--worker',
           '--reps', str(reps)] + (['--smoke'] if smoke else []) + (['--latency-only'] if latency_only else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if 'RESULT ' in line:
            return json.loads(line.split('RESULT ', 1)[1])
    raise SystemExit('bench/tf_ops.py: no result from {}:\n{}'.format(
        ' '.join(cmd), (out.stdout + out.stderr)[-4000:]))


def table(np_, by_backend):
    kern, sync = by_backend['kernels'], by_backend['kernels-sync']
    lines = ['| size | TF eager busbw GB/s | TF tf.function busbw GB/s | torch busbw GB/s | '
             'TF eager / torch | TF tf.function / torch | the same two, kernels-sync |',
             '|---|---|---|---|---|---|---|']
    for nbytes, (t, g, p) in sorted(kern['allreduce'].items(), key=lambda kv: int(kv[0])):
        size = int(nbytes)
        label = '%d KiB' % (size >> 10) if size < (1 << 20) else '%d MiB' % (size >> 20)
        st, sg, sp = sync['allreduce'][nbytes]
        lines.append('| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} / {:.2f} |'.format(
            label, t, g, p, t / p, g / p, st / sp, sg / sp))
    lines += ['', '| 100-gradient step ({} ranks) | kernels (ms) | kernels-sync (ms) | '
              'py_function (ms) |'.format(np_), '|---|---|---|---|']
    for key in ('tf', 'tf-nocomm', 'torch', 'torch-nocomm'):
        lines.append('| {} | {:.3f} | {:.3f} | {:.3f} |'.format(
            key, *(by_backend[b]['step'][key] * 1e3 for b in BACKENDS)))
    return '\n'.join(lines) + step_summary(by_backend) + '\n\n' + '\n'.join(latency_table(kern))


def latency_table(kern):
    lines = ['| eager allreduce latency (us) | TF | torch | TF / torch (time) | torch / TF (goal >= 0.9) | '
             'tf.identity | floor: tf.identity then torch, one loop | TF / floor |',
             '|---|---|---|---|---|---|---|---|']
    for nbytes, t in sorted(kern['latency'].items(), key=lambda kv: int(kv[0])):
        size = int(nbytes)
        label = '%d KiB' % (size >> 10) if size < (1 << 20) else '%d MiB' % (size >> 20)
        # The floor: TensorFlow's dispatch of one eager op (an eager tf.identity on CPU forwards its
        # input's buffer: dispatch, no copy) and torch's whole allreduce, timed as one loop.
        floor = t['floor']
        lines.append('| {} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.2f} |'.format(
            label, t['tf'] * 1e6, t['torch'] * 1e6, t['tf'] / t['torch'], t['torch'] / t['tf'], t['identity'] * 1e6,
            floor * 1e6, t['tf'] / floor))
    return lines


def step_summary(by_backend):
    kern = by_backend['kernels']
    lines = []
    s = kern['step']
    lines += ['', 'TF step / torch step (kernels): {:.2f}; communication cost per step: TF {:.3f} '
              'ms, torch {:.3f} ms; kernels-sync step / kernels step: {:.2f}; py_function step / '
              'kernels step: {:.2f}'.format(
                  s['tf'] / s['torch'], (s['tf'] - s['tf-nocomm']) * 1e3,
                  (s['torch'] - s['torch-nocomm']) * 1e3,
                  by_backend['kernels-sync']['step']['tf'] / s['tf'],
                  by_backend['py_function']['step']['tf'] / s['tf'])]
    return '\n'.join(lines)


def _median_result(results):
    """One worker result whose every figure is the median of those of `results`."""
    out = dict(results[0])
    out['allreduce'] = {k: tuple(statistics.median(r['allreduce'][k][i] for r in results)
                                 for i in range(3)) for k in results[0]['allreduce']}
    out['step'] = {k: statistics.median(r['step'][k] for r in results) for k in results[0]['step']}
    out['latency'] = {n: {k: statistics.median(r['latency'][n][k] for r in results) for k in results[0]['latency'][n]}
                      for n in results[0]['latency']}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--np', type=int, default=2)
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--rounds', type=int, default=1,
                    help='run the three ways one after the other this many times (medians)')
    ap.add_argument('--smoke', action='store_true')
    ap.add_argument('--latency-only', action='store_true', help='only the small-op latency table (kernels)')
    ap.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    ap.add_argument('--horovodrun', default=shutil.which('horovodrun') or 'horovodrun')
    args = ap.parse_args()
    if args.worker:
        worker(args.reps, args.smoke, args.latency_only)
        return
    if args.latency_only:
        kern = _median_result([run(args.np, args.reps, args.smoke, 'kernels', args.horovodrun, True)
                               for _ in range(args.rounds)])
        print('\n'.join(latency_table(kern)))
        return
    rounds = [{b: run(args.np, args.reps, args.smoke, b, args.horovodrun) for b in BACKENDS}
              for _ in range(1 if args.smoke else args.rounds)]
    by_backend = {b: _median_result([r[b] for r in rounds]) for b in BACKENDS}
    if args.smoke:
        print('bench/tf_ops.py smoke: ok ({})'.format(', '.join(
            r['backend'] for r in by_backend.values())))
        return
    print(table(args.np, by_backend))


if __name__ == '__main__':
    main()
