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
