#!/usr/bin/env python3
"""The cost of op=Adasum against a plain allreduce (op=Sum) of the same tensor, in one run.

    horovodrun -np 2 python3 bench/adasum_ratio.py [--mib 16] [--reps 15] [--dtype float32]

Each repetition times one hvd.allreduce with op=Sum and one with op=Adasum, back to back (so a
load change on the machine hits both), as the maximum over ranks; prints the medians and the
median of the per-repetition ratios. The Adasum result is checked against the pairwise formula
on 2 ranks.
"""
import argparse
import statistics
import time

import torch

import horovod.torch as hvd


def timed(fn):
    hvd.barrier()
    start = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - start
    slowest = hvd.allreduce(torch.tensor([elapsed], dtype=torch.float64), op=hvd.Max,
                            name='adasum_ratio.t')
    return out, slowest.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--mib', type=float, default=16)
    parser.add_argument('--reps', type=int, default=15)
    parser.add_argument('--dtype', default='float32', choices=['float16', 'bfloat16', 'float32', 'float64'])
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    count = int(args.mib * 2**20) // torch.tensor([], dtype=dtype).element_size()
    g = torch.Generator().manual_seed(hvd.rank())
    x = torch.randn(count, generator=g).to(dtype)
    sums, adasums, ratios = [], [], []
    for rep in range(args.reps + 2):  # the first two warm up (buffers, response cache)
        _, t_sum = timed(lambda: hvd.allreduce(x, op=hvd.Sum, name='adasum_ratio.sum'))
        out, t_adasum = timed(lambda: hvd.allreduce(x, op=hvd.Adasum, name='adasum_ratio.adasum'))
        if rep >= 2:
            sums.append(t_sum)
            adasums.append(t_adasum)
            ratios.append(t_adasum / t_sum)
    if hvd.size() == 2:
        a, b = (hvd.allgather(x.unsqueeze(0), name='adasum_ratio.check').double())
        dot = (a * b).sum()
        want = (1 - dot / (2 * (a * a).sum())) * a + (1 - dot / (2 * (b * b).sum())) * b
        tol = 1e-5 if dtype in (torch.float32, torch.float64) else 2e-2
        assert torch.allclose(out.double(), want, rtol=tol, atol=tol), 'Adasum result is off'
    if hvd.rank() == 0:
        print('np=%d %s %.1f MiB, %d reps: allreduce(Sum) median %.2f ms, Adasum median %.2f ms, '
              'ratio median %.2f (min %.2f, max %.2f)' % (
                  hvd.size(), args.dtype, args.mib, args.reps, 1e3 * statistics.median(sums),
                  1e3 * statistics.median(adasums), statistics.median(ratios), min(ratios),
                  max(ratios)))
    hvd.shutdown()


if __name__ == '__main__':
    main()
