"""horovod.tensorflow.keras on tf-keras 2 (run with TF_USE_LEGACY_KERAS=1) under
``horovodrun -np N``, for its current and its legacy optimizers. Usage: tf_keras_legacy.py
OUTPUT_DIR."""

import os
import sys

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd
from common import all_equal, check, data, fit_small_model

keras = tf.keras
LR = 0.05


def weights(model):
    return np.concatenate([v.numpy().ravel() for v in model.weights])


def train(opt_cls, distributed, batch=8, callbacks=(), options=None, momentum=0.9):
    return fit_small_model(keras, hvd, opt_cls(LR, momentum=momentum), distributed, batch=batch,
                           callbacks=callbacks, options=options)


def main(out_dir):
    check('tf_keras' in keras.__name__, 'tf.keras is not tf-keras: {}'.format(keras.__name__))
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    for opt_cls in (keras.optimizers.SGD, keras.optimizers.legacy.SGD):
        kind = opt_cls.__module__

        def cbs():
            return [hvd.callbacks.LearningRateWarmupCallback(LR, warmup_epochs=2)]
        dist, history = train(opt_cls, True, callbacks=[
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            hvd.callbacks.MetricAverageCallback()] + cbs())
        single, _ = train(opt_cls, False, callbacks=cbs())
        diff = np.abs(weights(dist) - weights(single)).max()
        check(diff < 1e-5, '{}: distributed fit differs by {}'.format(kind, diff))
        check(all_equal(weights(dist)), kind + ': weights differ across ranks')
        check(np.isclose(history.history['lr'][1], LR), str(history.history['lr']))
        check(type(dist.optimizer).__name__ == 'SGD', 'class name')

        dist, _ = train(opt_cls, True, batch=4, options={'backward_passes_per_step': 2,
                                                         'average_aggregated_gradients': True})
        single, _ = train(opt_cls, False, batch=8)
        diff = np.abs(weights(dist) - weights(single)).max()
        check(diff < 1e-5, '{}: backward_passes_per_step=2 differs by {}'.format(kind, diff))

        # h5 round trip: load_model wraps the optimizer (legacy_opts picks the family first).
        path = os.path.join(out_dir, 'tfk_{}_{}.h5'.format(r, 'legacy' in kind))
        dist.save(path)
        loaded = hvd.load_model(path, legacy_opts='legacy' in kind)
        check(hasattr(loaded.optimizer, '_hvd'), '{}: not wrapped: {}'.format(
            kind, type(loaded.optimizer).__mro__))
        x, y = data()
        loaded.fit(x[r::n], y[r::n], batch_size=8, epochs=1, verbose=0)
        check(all_equal(weights(loaded)), kind + ': loaded model diverged')

    # Value collectives and elastic state on tf-keras.
    check(np.isclose(hvd.allreduce(float(r)).numpy(), (n - 1) / 2), 'allreduce')
    state = hvd.elastic.KerasState(loaded, batch=r)
    loaded.layers[0].kernel.assign(tf.fill(loaded.layers[0].kernel.shape, float(r)))
    state.sync()
    check(all_equal(weights(loaded)) and state.batch == 0, 'KerasState.sync')
    print('tf-keras rank {}: ok'.format(r), flush=True)


if __name__ == '__main__':
    main(sys.argv[1])
