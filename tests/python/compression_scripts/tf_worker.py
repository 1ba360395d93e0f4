"""One rank of the TensorFlow compression checks (test_compression.py starts it under
horovodrun -np 2).

For no compression, PowerSGD rank 1 and 2 and the int8 quantizer: trains a small Keras
classifier with hvd.DistributedGradientTape inside a tf.function on this rank's shard of Gaussian
blobs, checks that the weights are identical on every rank and that the held-out accuracy
reaches the target; the legacy DistributedOptimizer takes PowerSGD too (eager). Then the
elastic state: TensorFlowKerasState(..., compression=c).restore() brings back the committed
residuals, and sync() gives every rank rank 0's Q while each keeps its residual. Prints
``OK <check>`` per passed check.
"""

import sys

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd

from common import check_training, ok

STEPS = 60


def blobs(n, seed):
    centers = np.random.default_rng(1234).standard_normal((8, 32)).astype(np.float32) * 0.8
    g = np.random.default_rng(seed)
    labels = g.integers(0, 8, n)
    return (centers[labels] + g.standard_normal((n, 32)).astype(np.float32)), labels


def make_model():
    tf.keras.utils.set_random_seed(7)
    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, 'relu'),
                                 tf.keras.layers.Dense(64, 'relu'), tf.keras.layers.Dense(8)])
    return model


def same_on_every_rank(variables):
    flat = tf.concat([tf.reshape(v, [-1]) for v in variables], 0)
    gathered = hvd.allgather(tf.expand_dims(flat, 0), name='compression_check_weights').numpy()
    return all(np.array_equal(gathered[0], gathered[i]) for i in range(1, gathered.shape[0]))


def accuracy_of(model):
    xt, yt = blobs(2000, seed=99)
    return float(np.mean(np.argmax(model(xt).numpy(), 1) == yt))



def train(compression, steps=STEPS, model=None, opt=None):
    model = model or make_model()
    opt = opt or tf.keras.optimizers.SGD(0.05, momentum=0.9)
    hvd.broadcast_variables(model.variables, root_rank=0)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    x, y = blobs(64 * steps, seed=100 + hvd.rank())
    for i in range(steps):
        step(x[64 * i:64 * (i + 1)], y[64 * i:64 * (i + 1)])
    assert same_on_every_rank(model.variables), '%r: weights differ across ranks' % compression
    return model, opt, accuracy_of(model)


def check_legacy_optimizer():
    # Plain tf.Variables (the legacy optimizer does not take Keras 3 variables).
    rng = np.random.default_rng(7)
    w1 = tf.Variable(rng.standard_normal((32, 64)).astype(np.float32) * 0.1)
    b1 = tf.Variable(np.zeros(64, np.float32))
    w2 = tf.Variable(rng.standard_normal((64, 8)).astype(np.float32) * 0.1)
    variables = [w1, b1, w2]
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                   compression=hvd.PowerSGD(rank=2))
    x, y = blobs(64 * 20, seed=100 + hvd.rank())

    def loss(xb, yb):
        logits = tf.matmul(tf.nn.relu(tf.matmul(xb, w1) + b1), w2)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
    first = None
    for i in range(20):
        xb, yb = x[64 * i:64 * (i + 1)], y[64 * i:64 * (i + 1)]
        opt.minimize(lambda: loss(xb, yb), var_list=variables)
        first = first if first is not None else float(loss(x, y))
    assert same_on_every_rank(variables)
    assert float(loss(x, y)) < first, 'the loss did not fall'
    ok('tf_legacy_optimizer')


def residuals(c):
    return [s.numpy().copy() for _, n, s in c.positioned_items() if n == 'residual']


def check_elastic():
    c = hvd.PowerSGD(rank=1)
    model, opt, _ = train(c, steps=5)
    state = hvd.elastic.TensorFlowKerasState(model, opt, compression=c, epoch=0)
    state.commit()
    committed = residuals(c)
    assert committed and any(np.abs(r).sum() > 0 for r in committed)
    train(c, steps=3, model=model, opt=opt)
    assert not np.array_equal(residuals(c)[0], committed[0])
    state.restore()
    assert all(np.array_equal(a, b) for a, b in zip(residuals(c), committed))
    assert state.epoch == 0
    ok('tf_elastic_restore')

    qs = [s for _, n, s in c.positioned_items() if n == 'q']
    qs[0].assign_add(tf.fill(qs[0].shape, float(hvd.rank())))
    mine = residuals(c)
    state.sync()
    assert same_on_every_rank(qs)
    assert all(np.array_equal(a, b) for a, b in zip(residuals(c), mine))
    ok('tf_elastic_sync')


def check_refusals():
    for kwargs, text in [(dict(op=hvd.Adasum), 'op must be Average or Sum'),
                         (dict(groups=2), 'groups')]:
        try:
            hvd.DistributedGradientTape(tf.GradientTape(), compression=hvd.PowerSGD(), **kwargs)
        except ValueError as e:
            assert text in str(e), e
        else:
            raise AssertionError('accepted %r' % kwargs)
    try:
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), compression=hvd.PowerSGD())
    except ValueError as e:
        assert 'DistributedGradientTape' in str(e), e
    else:
        raise AssertionError('Keras optimizer accepted PowerSGD')
    ok('tf_refusals')


def main():
    hvd.init()
    assert hvd.size() == 2, hvd.size()
    check_training(hvd, train, 'tf_tape_')
    check_legacy_optimizer()
    check_elastic()
    check_refusals()
    sys.stdout.write('DONE\n')


if __name__ == '__main__':
    main()
