"""Keras model.fit with Horovod on scikit-learn's bundled digits (8x8 images, nothing to
download): ``horovod.tensorflow.keras`` with the callbacks Horovod's docs show.

    horovodrun -np 2 python examples/keras/keras_digits.py

Each rank trains on its shard of the training set; the learning rate is scaled by the number of
ranks and warmed up over the first epochs; rank 0 prints one line per epoch.
"""

import argparse
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import horovod.tensorflow.keras as hvd  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--batch-size', type=int, default=32, help='batch per worker')
    parser.add_argument('--lr', type=float, default=0.002, help='learning rate of one worker')
    parser.add_argument('--warmup-epochs', type=int, default=2)
    parser.add_argument('--checkpoint', default=None,
                        help='rank 0 saves the best model (by val_accuracy) here (.keras)')
    return parser.parse_args()


def load_data():
    digits = load_digits()
    x = (digits.images / 16.0).astype('float32')[..., None]
    return train_test_split(x, digits.target.astype('int32'), test_size=0.25, random_state=0)


def build_model():
    keras = tf.keras
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, activation='relu', padding='same'),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation='relu'),
        keras.layers.Dense(10, activation='softmax'),
    ])


def main():
    args = parse_args()
    hvd.init()                                                          # 1. start Horovod
    tf.config.threading.set_intra_op_parallelism_threads(1)
    x_train, x_test, y_train, y_test = load_data()
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    tf.keras.utils.set_random_seed(42)
    model = build_model()
    opt = tf.keras.optimizers.Adam(args.lr * hvd.size())                # 2. scale the lr
    opt = hvd.DistributedOptimizer(opt)                                 # 3. average gradients
    model.compile(optimizer=opt, loss='sparse_categorical_crossentropy', metrics=['accuracy'])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),              # 4. same start state
        hvd.callbacks.MetricAverageCallback(),                          # average the metrics
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=args.lr * hvd.size(),
                                                 warmup_epochs=args.warmup_epochs,
                                                 verbose=1),
    ]
    if hvd.rank() == 0 and args.checkpoint:                             # 5. rank 0 saves
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(
            args.checkpoint, monitor='val_accuracy', save_best_only=True))

    history = model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=(x_test, y_test), callbacks=callbacks,
                        verbose=2 if hvd.rank() == 0 else 0)
    accuracy = history.history['val_accuracy'][-1]
    if hvd.rank() == 0:
        print('Final test accuracy: {:.2%} ({} workers, global batch {})'.format(
            accuracy, hvd.size(), args.batch_size * hvd.size()), flush=True)
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    gathered = hvd.allgather(weights[None]).numpy()
    assert np.array_equal(gathered, np.repeat(gathered[:1], hvd.size(), axis=0)), \
        'weights differ across workers'


if __name__ == '__main__':
    main()
