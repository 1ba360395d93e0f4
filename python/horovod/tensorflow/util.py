"""Helpers that Horovod's TensorFlow and Keras code (and some user scripts) import from
``horovod.tensorflow.util``.

``vars_to_refs``/``refs_to_vars`` turn variables into hashable keys and back. TensorFlow
variables have ``.ref()``; Keras 3 variables have neither ``.ref()`` nor a hash, so they are
keyed by identity (``_IdentityRef``, which keeps the variable alive as long as the key lives).
"""

import tensorflow as tf

# Horovod's flag for "TensorFlow 2.x" (this package supports TensorFlow 2 only).
_IS_TF2 = True


def _executing_eagerly():
    """True when TensorFlow runs eagerly here (not inside ``tf.function`` or a TF1 graph)."""
    return tf.executing_eagerly()


def _make_subgraph(f):
    """``f`` as a TensorFlow graph function (traced once per input signature)."""
    return tf.function(f)


def _cache(f):
    """Memoizes ``f(*args)`` per (args, executing eagerly): building a reduction function for
    the same settings twice returns the first one (args must be hashable)."""
    cache = {}

    def wrapper(*args):
        key = (args, _executing_eagerly())
        if key not in cache:
            cache[key] = f(*args)
        return cache[key]

    return wrapper


class _IdentityRef:
    """A hashable key for a variable without ``.ref()`` (Keras 3): equal only to a key of the
    same object."""

    __slots__ = ('_var',)

    def __init__(self, var):
        self._var = var

    def deref(self):
        return self._var

    def __hash__(self):
        return id(self._var)

    def __eq__(self, other):
        return isinstance(other, _IdentityRef) and other._var is self._var

    def __repr__(self):
        return '_IdentityRef({!r})'.format(getattr(self._var, 'name', self._var))


def var_ref(var):
    """A hashable key for one variable (``var.ref()`` where TensorFlow provides it)."""
    ref = getattr(var, 'ref', None)
    if callable(ref):
        return ref()
    return _IdentityRef(var)


def vars_to_refs(vars):
    """Variables (possibly nested lists) to hashable keys, lists becoming tuples."""
    if isinstance(vars, (list, tuple)):
        return tuple(vars_to_refs(v) for v in vars)
    return var_ref(vars)


def refs_to_vars(refs):
    """The inverse of ``vars_to_refs``: tuples become lists."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
