#!/usr/bin/env python3
"""Horovod + TensorFlow 2 custom training loop on scikit-learn's digits (8x8 images, 10
classes; the data ships with scikit-learn, nothing is downloaded).

    horovodrun -np 2 python examples/tensorflow2/tensorflow2_digits.py

Each rank trains on its own shard of the training split; DistributedGradientTape averages the
gradients, so every rank applies the same update. Rank 0 prints the loss and the held-out
accuracy (averaged over ranks) after each epoch. Expected: test accuracy >= 0.95 after the
default 15 epochs at 1 or 2 ranks. The script ends by checking that every rank holds the same
weights.
"""

import argparse

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import horovod.tensorflow as hvd


def parse_args():
    p = argparse.ArgumentParser(description='TensorFlow 2 digits example',
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--epochs', type=int, default=15)
    p.add_argument('--batch-size', type=int, default=32, help='per rank')
    p.add_argument('--lr', type=float, default=0.002, help='single-rank learning rate')
    p.add_argument('--min-accuracy', type=float, default=0.95,
                   help='fail (exit 1) below this final test accuracy; 0 disables')
    return p.parse_args()


def load_data():
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def main():
    args = parse_args()
    hvd.init()
    tf.random.set_seed(1234 + hvd.rank())  # different initial weights: the broadcast fixes them

    x_train, x_test, y_train, y_test = load_data()
    # Horovod step 1: each rank reads its own shard.
    x_shard, y_shard = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    dataset = (tf.data.Dataset.from_tensor_slices((x_shard, y_shard))
               .shuffle(len(x_shard), seed=hvd.rank()).batch(args.batch_size))

    model = tf.keras.Sequential([
        tf.keras.Input((64,)),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dense(10),
    ])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # Horovod step 2: scale the learning rate by the number of ranks (the global batch grows).
    opt = tf.keras.optimizers.Adam(args.lr * hvd.size())
    opt.build(model.trainable_variables)

    # Horovod step 3: start every rank from rank 0's weights and optimizer state.
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(opt.variables, root_rank=0)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        # Horovod step 4: average the gradients across ranks (one grouped reduction per step).
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    # Each rank scores its share of the test split; the counts are summed across ranks.
    x_eval, y_eval = x_test[hvd.rank()::hvd.size()], y_test[hvd.rank()::hvd.size()]
    accuracy = 0.0
    for epoch in range(args.epochs):
        losses = [train_step(x, y) for x, y in dataset]
        mean_loss = hvd.allreduce(tf.reduce_mean(tf.stack(losses)), name='epoch_loss')
        predictions = tf.argmax(model(x_eval, training=False), axis=1)
        correct = tf.reduce_sum(tf.cast(predictions == y_eval, tf.int64))
        totals = hvd.allreduce(tf.stack([correct, tf.constant(len(y_eval), tf.int64)]),
                               op=hvd.Sum, name='epoch_accuracy')
        accuracy = float(totals[0]) / float(totals[1])
        # Horovod step 5: only rank 0 reports (and would write checkpoints).
        if hvd.rank() == 0:
            print('epoch {:2d}: loss {:.4f}  test accuracy {:.4f}'.format(
                epoch + 1, float(mean_loss), accuracy), flush=True)

    mine = np.concatenate([w.numpy().ravel() for w in model.weights])
    everyone = hvd.allgather_object(mine)
    identical = all(np.array_equal(everyone[0], w) for w in everyone)
    if hvd.rank() == 0:
        print('weights identical on all {} ranks: {}'.format(hvd.size(), identical))
        print('final test accuracy: {:.4f}'.format(accuracy))
    if not identical or accuracy < args.min_accuracy:
        raise SystemExit(1)


if __name__ == '__main__':
    main()
