#!/usr/bin/env python3
"""Where a training step's time goes: the torch_e2e models timed phase by phase (zero_grad,
forward, backward, synchronize, step), to see what the gradient communication adds.

    horovodrun -np 2 python3 bench/torch_phases.py --model mlp            # DistributedOptimizer
    horovodrun -np 2 python3 bench/torch_phases.py --model mlp --nocomm   # the roof: no Horovod

Prints one line on rank 0: the median of each phase over the timed steps, in ms. One intra-op
thread per rank, as in torch_e2e.py. Not a test; run it interleaved with what it is compared to.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_e2e import batch_for, build_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--model', default='mlp', choices=['mlp', 'cnn'])
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--warmup', type=int, default=5)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--nocomm', action='store_true', help='plain optimizer, no Horovod at all')
    ap.add_argument('--tag', default='', help='a label for the output line')
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rank = int(os.environ.get('HOROVOD_RANK', '0'))
    if not args.nocomm:
        import horovod.torch as hvd
        hvd.init()
        rank = hvd.rank()
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    data, target = batch_for(args.model, args.batch)
    names = ('zero_grad', 'forward', 'backward', 'synchronize', 'step')
    times = {k: [] for k in names}
    for it in range(args.warmup + args.steps):
        t = [time.perf_counter()]
        opt.zero_grad()
        t.append(time.perf_counter())
        loss = F.cross_entropy(model(data), target)
        t.append(time.perf_counter())
        loss.backward()
        t.append(time.perf_counter())
        if not args.nocomm:
            opt.synchronize()
        t.append(time.perf_counter())
        if args.nocomm:
            opt.step()
        else:
            with opt.skip_synchronize():
                opt.step()
        t.append(time.perf_counter())
        if it >= args.warmup:
            for k, a, b in zip(names, t, t[1:]):
                times[k].append((b - a) * 1e3)
    if rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        print('%s %s %s total %.1f ms' % ('nocomm' if args.nocomm else 'horovod', args.tag,
                                         ' '.join('%s %.1f' % kv for kv in med.items()),
                                         sum(med.values())))


if __name__ == '__main__':
    main()
