#!/usr/bin/env python3
"""Horovod + JAX: an MLP on scikit-learn's digits (8x8 images, 10 classes; the data ships with
scikit-learn, nothing is downloaded), in plain JAX (no optax or Flax needed).

    horovodrun -np 2 python examples/jax/jax_digits.py
    mpirun -np 2 python examples/jax/jax_digits.py

Each rank trains on its own shard of the training split inside one jitted step;
hvd.DistributedOptimizer averages the gradients (one grouped allreduce, run from inside the
compiled step), so every rank applies the same update. Rank 0 prints the loss and the held-out
accuracy (averaged over ranks) after each epoch. Expected: test accuracy >= 0.95 after the
default 15 epochs at 1 or 2 ranks. The script ends by checking that every rank holds the same
weights.
"""

import argparse
import os
import sys

os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import horovod.jax as hvd  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description='JAX digits example',
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--epochs', type=int, default=15)
    p.add_argument('--batch-size', type=int, default=32, help='per rank')
    p.add_argument('--lr', type=float, default=0.05, help='single-rank learning rate')
    p.add_argument('--min-accuracy', type=float, default=0.95,
                   help='fail (exit 1) below this final test accuracy; 0 disables')
    return p.parse_args()


def sgd_momentum(lr, momentum=0.9):
    """An optax-style gradient transformation (init/update), written out."""
    def init(params):
        return jax.tree_util.tree_map(jnp.zeros_like, params)

    def update(grads, velocity, params=None):
        velocity = jax.tree_util.tree_map(lambda v, g: momentum * v + g, velocity, grads)
        return jax.tree_util.tree_map(lambda v: -lr * v, velocity), velocity
    return hvd.optimizer.GradientTransformation(init, update)


def init_params(key, sizes=(64, 128, 10)):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append({'w': jax.random.normal(sub, (n_in, n_out)) * np.sqrt(2.0 / n_in),
                       'b': jnp.zeros(n_out)})
    return params


def logits(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer['w'] + layer['b'])
    return x @ params[-1]['w'] + params[-1]['b']


def loss_fn(params, x, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(params, x)), y[:, None], 1))


def main():
    args = parse_args()
    hvd.init()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target.astype(np.int32), test_size=0.25, random_state=0, stratify=digits.target)
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    # Different initial weights on each rank on purpose: the broadcast makes them equal.
    params = hvd.broadcast_parameters(init_params(jax.random.PRNGKey(hvd.rank())), root_rank=0)
    # Learning rate scaled by the number of ranks (the effective batch grows with it).
    tx = hvd.DistributedOptimizer(sgd_momentum(args.lr * hvd.size()))
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        updates, opt_state = tx.update(grads, opt_state, params)
        return jax.tree_util.tree_map(jnp.add, params, updates), opt_state, loss

    @jax.jit
    def accuracy(params, xs, ys):
        return jnp.mean(jnp.argmax(logits(params, xs), -1) == ys)

    rng = np.random.default_rng(1234)
    # Every rank takes the same number of steps (the shards differ by at most one sample).
    steps = len(x_train) // args.batch_size
    test_acc = 0.0
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for i in range(steps):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            params, opt_state, loss = train_step(params, opt_state, x_train[idx], y_train[idx])
            losses.append(loss)
        mean_loss = float(hvd.allreduce(jnp.mean(jnp.stack(losses)), name='loss'))
        test_acc = float(hvd.allreduce(accuracy(params, x_test, y_test), name='accuracy'))
        if hvd.rank() == 0:
            print('epoch %2d: loss %.4f  test accuracy %.4f' % (epoch + 1, mean_loss, test_acc),
                  flush=True)

    flat = np.concatenate([np.asarray(leaf).ravel() for leaf in jax.tree_util.tree_leaves(params)])
    same = all(np.array_equal(flat, other) for other in hvd.allgather_object(flat))
    if hvd.rank() == 0:
        print('final test accuracy: %.4f' % test_acc)
        print('weights identical on all %d ranks: %s' % (hvd.size(), same), flush=True)
    hvd.shutdown()
    if not same or test_acc < args.min_accuracy:
        sys.exit(1)


if __name__ == '__main__':
    main()
