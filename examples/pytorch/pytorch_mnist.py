#!/usr/bin/env python3
"""Handwritten-digit classifier trained with Horovod (PyTorch).

The data is scikit-learn's bundled digits set (1,797 8x8 grey-scale images, no download): an
MNIST in miniature. The script is a standard Horovod program:

    horovodrun -np 2 python examples/pytorch/pytorch_mnist.py

What Horovod adds to the single-process script: hvd.init(), one thread per process, the learning
rate scaled by hvd.size(), each rank training on its own shard of every epoch, the optimizer
wrapped in hvd.DistributedOptimizer (gradients averaged across ranks while backward runs), the
initial model and optimizer state broadcast from rank 0, and the test metrics averaged.

Same global batch on any number of ranks: every rank takes every size()-th sample of the
epoch's permutation, so rank r's k-th batch of --batch-size samples is part of the k-th global
batch of size() * --batch-size samples, exactly the batch one process would take with a batch
size that large. With the learning rate scaled by size(), these two runs train the same model
(up to floating-point rounding):

    python examples/pytorch/pytorch_mnist.py --batch-size 64 --lr 0.05
    horovodrun -np 2 python examples/pytorch/pytorch_mnist.py --batch-size 32 --lr 0.025
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description='PyTorch digits classifier with Horovod',
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--batch-size', type=int, default=32, help='input batch size per worker')
    p.add_argument('--test-batch-size', type=int, default=100, help='test batch size per worker')
    p.add_argument('--epochs', type=int, default=15, help='number of epochs to train')
    p.add_argument('--lr', type=float, default=0.025,
                   help='learning rate for one worker (scaled by the number of workers)')
    p.add_argument('--momentum', type=float, default=0.9, help='SGD momentum')
    p.add_argument('--seed', type=int, default=42, help='random seed')
    p.add_argument('--fp16-allreduce', action='store_true', help='fp16 compression in allreduce')
    p.add_argument('--bf16-allreduce', action='store_true', help='bf16 compression in allreduce')
    p.add_argument('--gradient-predivide-factor', type=float, default=1.0,
                   help='apply gradient predivide factor in optimizer')
    p.add_argument('--log-interval', type=int, default=0,
                   help='batches between training-loss logs (0: once per epoch)')
    return p.parse_args()


def load_data(seed):
    """Digits as float tensors in [0, 1], shape [N, 1, 8, 8]; a fixed split into 1,440 training
    samples (divisible by 1-6, 8, 9, 10, 12, 16 workers, so no rank needs padding) and 357 test
    samples."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_test = len(labels) - 1440
    test, train = order[:n_test], order[n_test:]
    return (images[train], labels[train]), (images[test], labels[test])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def shard(num_samples, epoch, seed):
    """This rank's indices for an epoch: every size()-th of a permutation shared by all ranks
    (padded from the start so that every rank gets the same count, as DistributedSampler)."""
    perm = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed + epoch))
    per_rank = -(-num_samples // hvd.size())
    perm = torch.cat([perm, perm[:per_rank * hvd.size() - num_samples]])
    return perm[hvd.rank()::hvd.size()]


def metric_sum(value, name):
    return hvd.allreduce(torch.tensor(float(value), dtype=torch.float64), name=name,
                         op=hvd.Sum).item()


def main():
    args = parse_args()

    # Horovod: initialize library, one compute thread per process.
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    (train_x, train_y), (test_x, test_y) = load_data(args.seed)

    model = Net()
    # Horovod: scale learning rate by the number of workers (the global batch grows with it).
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                                momentum=args.momentum)

    # Horovod: broadcast parameters & optimizer state from rank 0 to all other processes.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.none
    if args.fp16_allreduce:
        compression = hvd.Compression.fp16
    elif args.bf16_allreduce:
        compression = hvd.Compression.bf16

    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    for epoch in range(1, args.epochs + 1):
        model.train()
        indices = shard(len(train_y), epoch, args.seed)
        total_loss, batches = 0.0, 0
        for batch_idx, start in enumerate(range(0, len(indices), args.batch_size)):
            idx = indices[start:start + args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            batches += 1
            if args.log_interval and batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                print('Train Epoch: {} [{}/{}]\tLoss: {:.6f}'.format(
                    epoch, start * hvd.size(), len(train_y), loss.item()), flush=True)

        # Horovod: average metrics over all ranks (each evaluates its shard of the test set).
        model.eval()
        test_indices = torch.arange(len(test_y))[hvd.rank()::hvd.size()]
        correct, test_loss = 0, 0.0
        with torch.no_grad():
            for start in range(0, len(test_indices), args.test_batch_size):
                idx = test_indices[start:start + args.test_batch_size]
                out = model(test_x[idx])
                test_loss += F.cross_entropy(out, test_y[idx], reduction='sum').item()
                correct += int((out.argmax(dim=1) == test_y[idx]).sum())
        count = metric_sum(len(test_indices), 'test_count')
        accuracy = metric_sum(correct, 'test_correct') / count
        test_loss = metric_sum(test_loss, 'test_loss') / count
        train_loss = metric_sum(total_loss / max(batches, 1), 'train_loss') / hvd.size()
        if hvd.rank() == 0:
            print('Epoch {:2d}: train loss {:.4f}, test loss {:.4f}, test accuracy {:.2f}%'
                  .format(epoch, train_loss, test_loss, 100.0 * accuracy), flush=True)

    if hvd.rank() == 0:
        print('Final test accuracy: {:.2f}% ({} workers, global batch {})'.format(
            100.0 * accuracy, hvd.size(), args.batch_size * hvd.size()), flush=True)
    return accuracy


if __name__ == '__main__':
    np.set_printoptions(precision=4)
    main()
