"""The tf-keras 2 (TF_USE_LEGACY_KERAS=1) DistributedOptimizer driven the way custom training
loops and Horovod's own Keras tests drive it, under ``horovodrun -np N``:
``opt._compute_gradients(loss, var_list, tape=tape)`` returning allreduced (grad, var) pairs that
``opt.apply_gradients`` applies without reducing again, ``opt._allreduce(grads, vars)``, and
``opt._agg_helper`` (None with backward_passes_per_step=1, else a helper whose ``counter``
variable counts the backward passes since the last allreduce), for both the current and the
``legacy`` tf-keras optimizers, eagerly and inside ``tf.function``."""

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd
from common import check

keras = tf.keras
FAMILIES = (keras.optimizers.SGD, keras.optimizers.legacy.SGD)


def rank_loss(var, scale=1.0):
    """A loss whose gradient with respect to ``var`` is ``(rank + 1) * scale`` everywhere."""
    return tf.reduce_sum(var) * (hvd.rank() + 1) * scale


def test_compute_gradients_are_reduced_once(opt_cls, op, in_function):
    n = hvd.size()
    var = tf.Variable([0.0, 0.0])
    opt = hvd.DistributedOptimizer(opt_cls(1.0), op=op)
    check(opt._agg_helper is None, 'backward_passes_per_step=1: _agg_helper must be None')

    def step():
        with tf.GradientTape() as tape:
            loss = rank_loss(var)
        pairs = opt._compute_gradients(loss, var_list=[var], tape=tape)
        opt.apply_gradients(pairs)
        return pairs[0][0]

    grad = tf.function(step)() if in_function else step()
    total = n * (n + 1) / 2
    expect = total / n if op == hvd.Average else total
    what = '{} op={} tf.function={}'.format(opt_cls.__module__, op, in_function)
    check(np.allclose(grad.numpy(), expect), '{}: reduced grad {} != {}'.format(
        what, grad.numpy(), expect))
    # Applied once with the reduced gradient: not reduced a second time by apply_gradients.
    check(np.allclose(var.numpy(), -expect), '{}: variable {} != {}'.format(
        what, var.numpy(), -expect))
    check(int(opt.iterations.numpy()) == 1, what + ': iterations')


def test_compute_gradients_callable_loss_and_grad_loss(opt_cls):
    var = tf.Variable([1.0, 2.0])
    opt = hvd.DistributedOptimizer(opt_cls(1.0), op=hvd.Sum)
    pairs = opt._compute_gradients(lambda: rank_loss(var), var_list=[var])
    n = hvd.size()
    check(np.allclose(pairs[0][0].numpy(), n * (n + 1) / 2), 'callable loss')
    with tf.GradientTape() as tape:
        loss = rank_loss(var)
    pairs = opt._compute_gradients(loss, [var], grad_loss=tf.constant(2.0), tape=tape)
    check(np.allclose(pairs[0][0].numpy(), n * (n + 1)), 'grad_loss scales the gradient')


def test_register_local_var(opt_cls):
    r, n = hvd.rank(), hvd.size()
    shared, local = tf.Variable([0.0]), tf.Variable([0.0])
    opt = hvd.DistributedOptimizer(opt_cls(1.0))
    opt.register_local_var(local)
    with tf.GradientTape() as tape:
        loss = rank_loss(shared) + rank_loss(local)
    grads = dict((id(v), g) for g, v in opt._compute_gradients(loss, [shared, local], tape=tape))
    check(np.allclose(grads[id(shared)].numpy(), (n + 1) / 2), 'shared gradient averaged')
    check(np.allclose(grads[id(local)].numpy(), (r + 1) / n), 'local gradient: own / size')


def test_aggregation_counter_cycles(opt_cls, bpps, in_function, average):
    """Custom loop through _compute_gradients + apply_gradients with local aggregation: the
    counter goes 1, 2, ..., bpps-1, 0, ...; the variable moves only on every bpps-th step, by
    the allreduced sum (or mean) of the passes' gradients."""
    n = hvd.size()
    var = tf.Variable([0.0])
    opt = hvd.DistributedOptimizer(opt_cls(1.0), backward_passes_per_step=bpps,
                                   average_aggregated_gradients=average)
    helper = opt._agg_helper
    check(helper is not None and isinstance(helper.counter, tf.Variable),
          '_agg_helper.counter must be a tf.Variable')
    check(int(helper.counter.numpy()) == 0, 'counter starts at 0')

    def step(k):
        with tf.GradientTape() as tape:
            loss = rank_loss(var, tf.cast(k + 1, tf.float32))
        opt.apply_gradients(opt._compute_gradients(loss, var_list=[var], tape=tape))

    run = tf.function(step) if in_function else step
    expected = 0.0
    pending = 0.0
    for k in range(2 * bpps + 1):
        run(tf.constant(k))
        # this pass's gradient averaged over ranks: mean(r + 1) * (k + 1)
        pending += (n + 1) / 2 * (k + 1)
        done = (k + 1) % bpps == 0
        if done:
            expected -= pending / bpps if average else pending
            pending = 0.0
        what = '{} bpps={} tf.function={} step {}'.format(opt_cls.__module__, bpps,
                                                          in_function, k)
        check(int(helper.counter.numpy()) == (k + 1) % bpps,
              '{}: counter {} != {}'.format(what, int(helper.counter.numpy()), (k + 1) % bpps))
        check(np.allclose(var.numpy(), expected), '{}: variable {} != {}'.format(
            what, var.numpy(), expected))
        check(int(opt.iterations.numpy()) == k + 1, what + ': iterations')


def test_allreduce_then_apply_in_function():
    """Horovod's own aggregation test: a legacy OptimizerV2 subclass that adds the gradient to
    the variable, ``_allreduce`` called eagerly and ``apply_gradients`` inside tf.function."""
    from tf_keras.src.optimizers.legacy import optimizer_v2

    class AddGradient(optimizer_v2.OptimizerV2):
        def _resource_apply_dense(self, grad, var, apply_state=None):
            return var.assign_add(grad)

        def get_config(self):
            return super().get_config()

    bpps, n = 4, hvd.size()
    opt = hvd.DistributedOptimizer(AddGradient('test'), backward_passes_per_step=bpps,
                                   average_aggregated_gradients=True)

    @tf.function
    def apply(grads, variables):
        opt.apply_gradients(zip(grads, variables))

    grads, variables = [tf.constant([float(hvd.rank())])], [tf.Variable([0.0])]
    per_aggregation = bpps * ((n - 1) / 2) / bpps   # mean rank, averaged over bpps passes
    for k in range(10):
        apply(opt._allreduce(grads, variables), variables)
        expect = ((k + 1) // bpps) * per_aggregation
        check(np.isclose(variables[0].numpy()[0], expect),
              'step {}: {} != {}'.format(k, variables[0].numpy(), expect))
        check(int(opt.iterations.numpy()) == k + 1, 'iterations')
        counter = int(opt._agg_helper.counter.numpy())
        check(counter == (k + 1) % bpps, 'counter {} step {}'.format(counter, k))


def test_fit_and_sparse_as_dense(opt_cls):
    """minimize() (model.fit / train_on_batch) goes through the same path: embeddings with
    sparse_as_dense, and plain dense layers with local aggregation, still train and stay equal
    across ranks."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((10,), dtype='int32'), keras.layers.Embedding(50, 4),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    opt = hvd.DistributedOptimizer(opt_cls(0.01), sparse_as_dense=True,
                                   backward_passes_per_step=2)
    model.compile(optimizer=opt, loss='mse')
    rng = np.random.RandomState(hvd.rank())
    x, y = rng.randint(50, size=(8, 10)), rng.randn(8, 1).astype('float32')
    before = [w.numpy().copy() for w in model.weights]
    model.train_on_batch(x, y)
    check(all(np.array_equal(a, w.numpy()) for a, w in zip(before, model.weights)),
          'first of two passes must not change the weights')
    check(int(opt._agg_helper.counter.numpy()) == 1, 'counter after one pass')
    model.train_on_batch(x, y)
    check(not all(np.array_equal(a, w.numpy()) for a, w in zip(before, model.weights)),
          'the second pass applies')
    check(int(opt._agg_helper.counter.numpy()) == 0, 'counter after two passes')
    from common import all_equal
    check(all_equal(np.concatenate([w.numpy().ravel() for w in model.weights])),
          'weights differ across ranks')


def main():
    check('tf_keras' in keras.__name__, 'tf.keras is not tf-keras: {}'.format(keras.__name__))
    hvd.init()
    for opt_cls in FAMILIES:
        for op in (hvd.Average, hvd.Sum):
            for in_function in (False, True):
                test_compute_gradients_are_reduced_once(opt_cls, op, in_function)
        test_compute_gradients_callable_loss_and_grad_loss(opt_cls)
        test_register_local_var(opt_cls)
        for in_function in (False, True):
            test_aggregation_counter_cycles(opt_cls, 3, in_function, average=False)
        test_aggregation_counter_cycles(opt_cls, 2, True, average=True)
        test_fit_and_sparse_as_dense(opt_cls)
    test_allreduce_then_apply_in_function()
    print('tf-keras optimizer api rank {}: ok'.format(hvd.rank()), flush=True)


if __name__ == '__main__':
    main()
