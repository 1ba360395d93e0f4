"""horovod.keras on Keras 3 with the backend named by KERAS_BACKEND (torch or jax), under
``horovodrun -np N``. Usage: keras3_backend.py OUTPUT_DIR (a saved model is left there)."""

import os
import sys
import warnings

import numpy as np

import keras
import horovod.keras as hvd
from common import all_equal, check, data, fit_small_model

BACKEND = keras.backend.backend()
LR = 0.05


def to_numpy(v):
    return np.asarray(keras.ops.convert_to_numpy(v))


def weights(model):
    return np.concatenate([to_numpy(v).ravel() for v in model.weights])


def train(distributed, batch=8, callbacks=(), options=None, lr=LR, momentum=0.9, epochs=2):
    return fit_small_model(keras, hvd, keras.optimizers.SGD(lr, momentum=momentum), distributed,
                           batch=batch, epochs=epochs, callbacks=callbacks, options=options)


def main(out_dir):
    hvd.init()
    r, n = hvd.rank(), hvd.size()

    # Training with the callbacks equals one process with the global batch.
    def cbs():
        return [hvd.callbacks.LearningRateWarmupCallback(LR, warmup_epochs=2)]
    dist, history = train(True, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                           hvd.callbacks.MetricAverageCallback()] + cbs())
    single, _ = train(False, callbacks=cbs())
    diff = np.abs(weights(dist) - weights(single)).max()
    check(diff < 1e-5, '{}: distributed fit differs from the global batch by {}'.format(
        BACKEND, diff))
    check(all_equal(weights(dist)), BACKEND + ': weights differ across ranks')
    check(np.isclose(history.history['lr'][1], LR), 'lr after warmup: {}'.format(
        history.history['lr']))
    check(all_equal(history.history['loss']), 'MetricAverageCallback: losses differ')

    # The first-batch broadcast makes different initial weights identical.
    keras.utils.set_random_seed(10 + r)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01),
                                                     compression=hvd.Compression.fp16),
                  loss='mse')
    check(not all_equal(weights(model)), 'seeds should differ per rank')
    x, y = data()
    model.fit(x[r::n], y[r::n], batch_size=8, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    check(all_equal(weights(model)), BACKEND + ': broadcast callback left weights different')
    opt_state = np.concatenate([to_numpy(v).astype(np.float64).ravel()
                                for v in model.optimizer.variables])
    check(all_equal(opt_state), BACKEND + ': optimizer state differs across ranks')

    # Local aggregation: 2 passes of batch 4 = one pass of batch 8 (averaged).
    dist, _ = train(True, batch=4, options={'backward_passes_per_step': 2,
                                            'average_aggregated_gradients': True})
    single, _ = train(False, batch=8)
    diff = np.abs(weights(dist) - weights(single)).max()
    check(diff < 1e-5, 'backward_passes_per_step=2 differs by {}'.format(diff))
    check(int(to_numpy(dist.optimizer.iterations)) == 2 * len(data()[0]) // n // 4,
          'iterations: {}'.format(to_numpy(dist.optimizer.iterations)))
    path = os.path.join(out_dir, 'bpps_{}_{}.keras'.format(BACKEND, r))
    dist.save(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        plain = keras.models.load_model(path)  # the accumulators are not saved
    check(not [w for w in caught if 'Skipping variable loading' in str(w.message)],
          'optimizer state skipped on load: {}'.format([str(w.message) for w in caught]))
    check(all(np.array_equal(to_numpy(a), to_numpy(b))
              for a, b in zip(plain.optimizer.variables, dist.optimizer.variables)),
          'saved optimizer state differs')

    # Value collectives give backend tensors.
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        avg = hvd.allreduce(np.float32(r))
    check(keras.ops.is_tensor(avg) and np.isclose(to_numpy(avg), (n - 1) / 2), str(avg))
    check(to_numpy(hvd.allgather(np.array([r]))).tolist() == list(range(n)), 'allgather')
    check(to_numpy(hvd.broadcast(np.array([r]), 0)).tolist() == [0], 'broadcast')

    # Elastic state: sync makes every rank rank 0's.
    state = hvd.elastic.KerasState(model, epoch=r)
    model.layers[0].kernel.assign(np.full((4, 1), float(r), 'float32'))
    state.sync()
    check(all_equal(weights(model)) and state.epoch == 0, 'KerasState.sync')

    # Save, and load_model wraps the optimizer again with its state.
    path = os.path.join(out_dir, 'model_{}_{}.keras'.format(BACKEND, r))
    model.save(path)
    loaded = hvd.load_model(path)
    check(hasattr(loaded.optimizer, '_hvd') and type(loaded.optimizer).__name__ == 'Adam',
          'load_model did not wrap: {}'.format(type(loaded.optimizer).__mro__))
    loaded.fit(x[r::n], y[r::n], batch_size=8, epochs=1, verbose=0)
    check(all_equal(weights(loaded)), 'loaded model diverged across ranks')
    print('{} rank {}: ok'.format(BACKEND, r), flush=True)


if __name__ == '__main__':
    main(sys.argv[1])
