"""horovod.tensorflow.keras in TF1 graph mode (eager execution disabled; tf-keras, run with
TF_USE_LEGACY_KERAS=1) under ``horovodrun -np N``: broadcast_global_variables runs the
broadcast through the Keras session at once."""

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

import horovod.tensorflow.keras as hvd  # noqa: E402
from common import check  # noqa: E402


def main():
    hvd.init()
    v = tf.compat.v1.get_variable('v', initializer=tf.constant([float(hvd.rank() + 1)] * 3))
    session = tf.compat.v1.keras.backend.get_session()
    session.run(tf.compat.v1.global_variables_initializer())
    hvd.broadcast_global_variables(0)
    check(np.array_equal(session.run(v), [1.0, 1.0, 1.0]), 'not broadcast: {}'.format(
        session.run(v)))
    print('tf1 graph rank {}: ok'.format(hvd.rank()), flush=True)


if __name__ == '__main__':
    main()
