"""Helpers for the Keras scripts that test_keras_backends.py runs under ``horovodrun``: the
shared data, and a check that fails the script (non-zero exit) with a message."""

import numpy as np


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def data(n=96):
    rng = np.random.RandomState(0)
    x = rng.randn(n, 4).astype('float32')
    y = (x @ np.array([1., -2., 3., .5], dtype='float32'))[:, None]
    return x, y


def all_equal(array):
    """True iff ``array`` is bitwise identical on every rank."""
    from horovod._keras import numpy_ops
    gathered = numpy_ops.allgather(np.asarray(array, dtype=np.float64).reshape(1, -1))
    return np.array_equal(gathered, np.repeat(gathered[:1], len(gathered), axis=0))


def fit_small_model(keras, hvd, optimizer, distributed, batch=8, epochs=2, callbacks=(),
                    options=None):
    """(model, history) of a small dense model fit with ``optimizer`` (wrapped in
    ``hvd.DistributedOptimizer(optimizer, **options)`` when ``distributed``). Rank r fits samples
    r, r+N, ... with batch ``batch``; the reference (not distributed) fits every sample with
    batch N * batch: with averaged gradients the two are the same computation."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    if distributed:
        optimizer = hvd.DistributedOptimizer(optimizer, **(options or {}))
    model.compile(optimizer=optimizer, loss='mse')
    x, y = data()
    if distributed:
        x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
    else:
        batch *= hvd.size()
    history = model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
                        callbacks=list(callbacks))
    return model, history
