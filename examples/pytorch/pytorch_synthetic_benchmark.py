#!/usr/bin/env python3
"""Synthetic training benchmark (Horovod's metric: images/sec per worker and in total).

    horovodrun -np 2 python examples/pytorch/pytorch_synthetic_benchmark.py [--model mlp]

Each step runs forward, backward and a DistributedOptimizer step on random data. After
--num-warmup-batches steps, --num-iters iterations of --num-batches-per-iter steps are timed;
the result is the mean +- 1.96 standard deviations of the per-iteration rates.

Models: 'cnn' (default) is a small convolutional net on 3x32x32 images; 'mlp' is a
fully-connected net on flattened 3x32x32 inputs with about 50 M parameters (about 200 MB of
float32 gradients per step), which makes the step communication-bound.
"""

import argparse
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description='PyTorch Synthetic Benchmark',
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--fp16-allreduce', action='store_true', default=False,
                   help='use fp16 compression during allreduce')
    p.add_argument('--bf16-allreduce', action='store_true', default=False,
                   help='use bf16 compression during allreduce')
    p.add_argument('--model', type=str, default='cnn', choices=['cnn', 'mlp'],
                   help='model to benchmark')
    p.add_argument('--batch-size', type=int, default=32, help='input batch size')
    p.add_argument('--num-warmup-batches', type=int, default=10,
                   help='number of warm-up batches that don\'t count towards benchmark')
    p.add_argument('--num-batches-per-iter', type=int, default=10,
                   help='number of batches per benchmark iteration')
    p.add_argument('--num-iters', type=int, default=10, help='number of benchmark iterations')
    p.add_argument('--use-adasum', action='store_true', default=False,
                   help='use adasum algorithm to do reduction')
    p.add_argument('--num-threads', type=int, default=1,
                   help='torch compute threads per worker')
    return p.parse_args()


class SmallCNN(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.fc1 = nn.Linear(128 * 4 * 4, 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def mlp(num_classes=1000):
    # 3072*4096 + 2 * 4096*4096 + 4096*1000 weights: about 50.3 M parameters
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4096), nn.ReLU(),
                         nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, num_classes))


def main():
    args = parse_args()

    hvd.init()
    torch.set_num_threads(args.num_threads)
    torch.manual_seed(42)

    model = SmallCNN() if args.model == 'cnn' else mlp()

    # By default, Adasum doesn't need scaling up learning rate.
    lr_scaler = hvd.size() if not args.use_adasum else 1
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler)

    compression = hvd.Compression.none
    if args.fp16_allreduce:
        compression = hvd.Compression.fp16
    elif args.bf16_allreduce:
        compression = hvd.Compression.bf16

    # Horovod: wrap optimizer with DistributedOptimizer (with --use-adasum: the Adasum delta
    # optimizer, which needs a power-of-2 number of ranks).
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average)

    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, 32, 32)
    target = torch.randint(0, 1000, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward()
        optimizer.step()

    def log(s, nl=True):
        if hvd.rank() != 0:
            return
        print(s, end='\n' if nl else '', flush=True)

    device = 'CPU'
    num_params = sum(p.numel() for p in model.parameters())
    log('Model: %s (%.1f M parameters)' % (args.model, num_params / 1e6))
    log('Batch size: %d' % args.batch_size)
    log('Number of %ss: %d' % (device, hvd.size()))

    # Warm-up
    log('Running warmup...')
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    # Benchmark
    log('Running benchmark...')
    img_secs = []
    for x in range(args.num_iters):
        time = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / time
        log('Iter #%d: %.1f img/sec per %s' % (x, img_sec, device))
        img_secs.append(img_sec)

    # Results
    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    log('Img/sec per %s: %.1f +-%.1f' % (device, img_sec_mean, img_sec_conf))
    log('Total img/sec on %d %s(s): %.1f +-%.1f' %
        (hvd.size(), device, hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))


if __name__ == '__main__':
    main()
