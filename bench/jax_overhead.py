#!/usr/bin/env python3
"""horovod.jax's overhead beside horovod.torch's, on the same core and ranks:

    horovodrun -np 2 python bench/jax_overhead.py [--reps 300]

- eager: one synchronous 8-byte allreduce (median latency, us);
- step: the gradients of one step (100 float32 arrays of 1000 elements) averaged in one grouped
  allreduce, in torch (hvd.grouped_allreduce) and in JAX eagerly (hvd.grouped_allreduce) and
  inside a jitted step (hvd.allreduce_gradients through the ordered io_callback); for jit, the
  same jitted step without the allreduce is subtracted, which leaves Horovod's part.
Rank 0 prints one line per measurement and the JAX/torch ratios.
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


def median_us(fn, reps):
    for _ in range(10):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples)) * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--reps', type=int, default=300)
    p.add_argument('--grads', type=int, default=100)
    p.add_argument('--elems', type=int, default=1000)
    args = p.parse_args()
    torch.set_num_threads(1)
    ht.init()
    results = {}
    tx, jx = torch.ones(2), jnp.ones(2)
    results['torch eager 8 B'] = median_us(lambda: ht.allreduce(tx, name='e'), args.reps)
    results['jax eager 8 B'] = median_us(
        lambda: hj.allreduce(jx, name='e').block_until_ready(), args.reps)
    tgrads = [torch.ones(args.elems) for _ in range(args.grads)]
    jgrads = [jnp.ones(args.elems) for _ in range(args.grads)]
    results['torch step'] = median_us(lambda: ht.grouped_allreduce(tgrads, name='s'), args.reps)
    results['jax eager step'] = median_us(
        lambda: jax.block_until_ready(hj.grouped_allreduce(jgrads, name='s')), args.reps)
    with_hvd = jax.jit(lambda g: [x * 2 for x in hj.allreduce_gradients(g, name='j')])
    without = jax.jit(lambda g: [x * 2 for x in g])
    t_with = median_us(lambda: jax.block_until_ready(with_hvd(jgrads)), args.reps)
    t_without = median_us(lambda: jax.block_until_ready(without(jgrads)), args.reps)
    results['jax jit step (Horovod part)'] = t_with - t_without
    if ht.rank() == 0:
        for k, v in results.items():
            print('%-30s %9.1f us' % (k, v))
        print('ratio eager jax/torch: %.2f' % (results['jax eager 8 B'] / results['torch eager 8 B']))
        print('ratio jit step jax/torch: %.2f' % (results['jax jit step (Horovod part)'] /
                                                 results['torch step']))
        print('ratio eager step jax/torch: %.2f' % (results['jax eager step'] /
                                                   results['torch step']))
    ht.shutdown()


if __name__ == '__main__':
    main()
