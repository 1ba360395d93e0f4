"""Keras 3 on any backend with Horovod: ``horovod.keras`` trains the same digits classifier on
TensorFlow, PyTorch or JAX (pick one with KERAS_BACKEND; nothing to download).

    KERAS_BACKEND=torch horovodrun -np 2 python examples/keras/keras_any_backend.py
    KERAS_BACKEND=jax   horovodrun -np 2 python examples/keras/keras_any_backend.py

Each rank trains on its shard; gradients are averaged across ranks inside Keras's own compiled
train step (tf.function, torch eager, or jax.jit); rank 0 prints one line per epoch.
"""

import argparse
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import horovod.keras as hvd  # noqa: E402


class PrintEpoch(keras.callbacks.Callback):
    """One line per epoch (after MetricAverageCallback: the averages over all workers)."""

    def on_epoch_end(self, epoch, logs=None):
        print('Epoch {:2d}: loss {:.4f}, accuracy {:.2%}, test accuracy {:.2%}, lr {:.4g}'.format(
            epoch + 1, logs['loss'], logs['accuracy'], logs['val_accuracy'], logs['lr']),
            flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--batch-size', type=int, default=32, help='batch per worker')
    parser.add_argument('--lr', type=float, default=0.002, help='learning rate of one worker')
    args = parser.parse_args()

    hvd.init()
    digits = load_digits()
    x = (digits.data / 16.0).astype('float32')
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.25,
                                                        random_state=0)
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    keras.utils.set_random_seed(42)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation='relu'),
                              keras.layers.Dense(10, activation='softmax')])
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(args.lr * hvd.size()))
    model.compile(optimizer=opt, loss='sparse_categorical_crossentropy', metrics=['accuracy'])
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(args.lr * hvd.size(), warmup_epochs=2)]
    if hvd.rank() == 0:
        print('Keras {} on {}, {} workers'.format(keras.__version__, keras.backend.backend(),
                                                  hvd.size()), flush=True)
        callbacks.append(PrintEpoch())
    history = model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=(x_test, y_test), callbacks=callbacks, verbose=0)
    if hvd.rank() == 0:
        print('Final test accuracy: {:.2%}'.format(history.history['val_accuracy'][-1]),
              flush=True)


if __name__ == '__main__':
    main()
