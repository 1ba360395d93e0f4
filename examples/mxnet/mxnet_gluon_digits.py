#!/usr/bin/env python3
"""Horovod + MXNet Gluon: an MLP on scikit-learn's digits (8x8 images, 10 classes; the data
ships with scikit-learn, nothing is downloaded). Needs MXNet 1.9.1 (numpy < 1.24).

    horovodrun -np 2 python examples/mxnet/mxnet_gluon_digits.py

Each rank trains on its own shard of the training split; hvd.DistributedTrainer averages the
gradients, so every rank applies the same update. The first layer's shape is inferred at the
first forward pass (deferred initialisation): broadcast_parameters broadcasts it then. Rank 0
prints the loss and the held-out accuracy (averaged over ranks) after each epoch. Expected: test
accuracy >= 0.95 after the default 15 epochs at 1 or 2 ranks. The script ends by checking that
every rank holds the same weights.
"""

import argparse
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import horovod.mxnet as hvd


def parse_args():
    p = argparse.ArgumentParser(description='MXNet Gluon digits example',
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--epochs', type=int, default=15)
    p.add_argument('--batch-size', type=int, default=32, help='per rank')
    p.add_argument('--lr', type=float, default=0.05, help='single-rank learning rate')
    p.add_argument('--min-accuracy', type=float, default=0.95,
                   help='fail (exit 1) below this final test accuracy; 0 disables')
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target.astype(np.float32), test_size=0.25, random_state=0,
        stratify=digits.target)
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(128, activation='relu'), gluon.nn.Dense(10))
    mx.random.seed(hvd.rank())  # different initial weights on purpose: the broadcast equalises
    net.initialize(mx.init.Xavier())
    net.hybridize()
    # Deferred: the first layer gets its weights at the first forward, and is broadcast then.
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), 'sgd',
                                     {'learning_rate': args.lr * hvd.size(), 'momentum': 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    rng = np.random.default_rng(1234)
    steps = len(x_train) // args.batch_size  # every rank takes the same number of steps
    test_acc = 0.0
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        total = mx.nd.zeros((1,))
        for i in range(steps):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            data, label = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(args.batch_size)
            total += loss.mean()
        mean_loss = hvd.allreduce(total / steps, name='loss').asscalar()
        pred = net(mx.nd.array(x_test)).argmax(axis=1).asnumpy()
        acc = mx.nd.array([np.mean(pred == y_test)])
        test_acc = hvd.allreduce(acc, name='accuracy').asscalar()
        if hvd.rank() == 0:
            print('epoch %2d: loss %.4f  test accuracy %.4f' % (epoch + 1, mean_loss, test_acc),
                  flush=True)

    flat = np.concatenate([p.data().asnumpy().ravel()
                           for _, p in sorted(net.collect_params().items())])
    same = all(np.array_equal(flat, other) for other in hvd.allgather_object(flat))
    if hvd.rank() == 0:
        print('final test accuracy: %.4f' % test_acc)
        print('weights identical on all %d ranks: %s' % (hvd.size(), same), flush=True)
    hvd.shutdown()
    if not same or test_acc < args.min_accuracy:
        sys.exit(1)


if __name__ == '__main__':
    main()
