#!/usr/bin/env python3
"""horovod.jax's overhead beside horovod.torch's, on the same core and ranks:

    horovodrun -np 2 python bench/jax_overhead.py [--reps 300] [--rounds 5] [--clock cpu]

- eager: one synchronous 8-byte allreduce (median latency, us);
- step: the gradients of one step (100 float32 arrays of 1000 elements) averaged in one grouped
  allreduce, in torch (hvd.grouped_allreduce) and in JAX eagerly (hvd.grouped_allreduce) and
  inside a jitted step (hvd.allreduce_gradients), once per jit path: XLA FFI custom calls
  ('ffi') and ordered io_callbacks ('callback'). For jit, the same jitted step without the
  allreduce is subtracted, which leaves Horovod's part.
Each measurement is the median of --reps calls; the measurements run in --rounds rounds (in
turn, so that load changes hit all of them alike) and the median over rounds is reported. Rank
0 prints one line per measurement and the JAX/torch ratios; for the jitted step also the median
of the ratios within each round (robust on a loaded machine, where whole rounds slow down).
--clock cpu times each call by this process's CPU time (all its threads: the caller's and the
engine's) instead of the wall clock: on a machine shared with other work it leaves out the time
the rank spent descheduled, or waiting for a descheduled peer.
"""

import argparse
import os
import time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import horovod.jax as hj  # noqa: E402
import horovod.torch as ht  # noqa: E402
from horovod.jax import _xla  # noqa: E402


CLOCK = {'wall': time.perf_counter, 'cpu': time.process_time}
clock = time.perf_counter


def median_us(fn, reps):
    for _ in range(10):
        fn()
    samples = []
    for _ in range(reps):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return float(np.median(samples)) * 1e6


def jit_steps(jgrads, path):
    """(step with Horovod, the same step without) for one jit path, compiled."""
    _xla.select(path)
    with_hvd = jax.jit(lambda g: [x * 2 for x in hj.allreduce_gradients(g, name='j' + path)])
    without = jax.jit(lambda g: [x * 2 for x in g])
    jax.block_until_ready(with_hvd(jgrads))
    return with_hvd, without


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--reps', type=int, default=300)
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--grads', type=int, default=100)
    p.add_argument('--elems', type=int, default=1000)
    p.add_argument('--clock', choices=sorted(CLOCK), default='wall')
    args = p.parse_args()
    global clock
    clock = CLOCK[args.clock]
    torch.set_num_threads(1)
    ht.init()
    tx, jx = torch.ones(2), jnp.ones(2)
    tgrads = [torch.ones(args.elems) for _ in range(args.grads)]
    jgrads = [jnp.ones(args.elems) for _ in range(args.grads)]
    steps = {path: jit_steps(jgrads, path) for path in _xla.PATHS}

    def jit_part(path):
        with_hvd, without = steps[path]
        return (median_us(lambda: jax.block_until_ready(with_hvd(jgrads)), args.reps) -
                median_us(lambda: jax.block_until_ready(without(jgrads)), args.reps))

    measurements = {
        'torch eager 8 B': lambda: median_us(lambda: ht.allreduce(tx, name='e'), args.reps),
        'jax eager 8 B': lambda: median_us(
            lambda: hj.allreduce(jx, name='e').block_until_ready(), args.reps),
        'torch step': lambda: median_us(lambda: ht.grouped_allreduce(tgrads, name='s'),
                                        args.reps),
        'jax eager step': lambda: median_us(
            lambda: jax.block_until_ready(hj.grouped_allreduce(jgrads, name='s')), args.reps),
    }
    for path in _xla.PATHS:
        measurements['jax jit step, %s (Horovod part)' % path] = lambda path=path: jit_part(path)
    rounds = {k: [] for k in measurements}
    for _ in range(args.rounds):
        for k, measure in measurements.items():
            rounds[k].append(measure())
    results = {k: float(np.median(v)) for k, v in rounds.items()}
    if ht.rank() == 0:
        print('median over %d rounds of the median of %d calls, %d ranks, %s clock' %
              (args.rounds, args.reps, ht.size(), args.clock))
        for k, v in results.items():
            print('%-36s %9.1f us   (rounds: %s)' % (k, v, ' '.join('%.0f' % x for x in rounds[k])))
        torch_step = results['torch step']
        print('ratio eager 8 B jax/torch: %.2f' % (results['jax eager 8 B'] /
                                                  results['torch eager 8 B']))
        print('ratio eager step jax/torch: %.2f' % (results['jax eager step'] / torch_step))
        for path in _xla.PATHS:
            key = 'jax jit step, %s (Horovod part)' % path
            per_round = [j / t for j, t in zip(rounds[key], rounds['torch step'])]
            print('ratio jit step (%s) jax/torch: %.2f; median of the per-round ratios %.2f '
                  '(rounds: %s)' % (path, results[key] / torch_step, float(np.median(per_round)),
                                    ' '.join('%.2f' % x for x in per_round)))
    ht.shutdown()


if __name__ == '__main__':
    main()
