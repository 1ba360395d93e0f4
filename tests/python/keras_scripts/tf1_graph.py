"""horovod.tensorflow.keras in TF1 graph mode (eager execution disabled; tf-keras, run with
TF_USE_LEGACY_KERAS=1) under ``horovodrun -np N``: broadcast_global_variables runs the
broadcast through the Keras session at once, and model.fit with a DistributedOptimizer (the
legacy optimizers' get_updates path) keeps every rank's weights identical."""

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

import horovod.tensorflow.keras as hvd  # noqa: E402
from common import check, data  # noqa: E402


def main():
    hvd.init()
    v = tf.compat.v1.get_variable('v', initializer=tf.constant([float(hvd.rank() + 1)] * 3))
    session = tf.compat.v1.keras.backend.get_session()
    session.run(tf.compat.v1.global_variables_initializer())
    hvd.broadcast_global_variables(0)
    check(np.array_equal(session.run(v), [1.0, 1.0, 1.0]), 'not broadcast: {}'.format(
        session.run(v)))

    keras = tf.keras
    r, n = hvd.rank(), hvd.size()
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])
    opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.05, momentum=0.9))
    model.compile(optimizer=opt, loss='mse')
    x, y = data()
    model.fit(x[r::n], y[r::n], batch_size=8, epochs=2, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    w = np.concatenate([a.ravel() for a in model.get_weights()])
    gathered = hvd.allgather(w[None])
    check(np.array_equal(gathered, np.repeat(gathered[:1], n, axis=0)),
          'weights differ across ranks')
    print('tf1 graph rank {}: ok'.format(r), flush=True)


if __name__ == '__main__':
    main()
