"""Gradient reduction for each Keras backend: ``grouped_allreduce(grads, ...)`` for the tensors
that backend's trainer hands to ``optimizer.apply``.

* TensorFlow (Keras 3 on TF, tf-keras): ``horovod.tensorflow``'s grouped allreduce, which runs
  eagerly or as one stateful graph op inside ``tf.function`` (``model.fit``).
* PyTorch: ``horovod.torch``'s grouped allreduce on the torch tensors (zero-copy views).
* JAX: Keras jit-compiles the train step, so the reduction is a host callback
  (``jax.experimental.io_callback``, ordered) around a grouped allreduce of numpy arrays; it
  also runs eagerly when the model is compiled with ``jit_compile=False``.

Each takes ``(tensors, name, op, prescale_factor, postscale_factor, process_set)`` (TensorFlow's
also ``device_dense``/``device_sparse``) and returns a list of reduced tensors of the same shapes
and dtypes, reduced in one call into the core.
"""

import numpy as np

from horovod._keras import numpy_ops


def tensorflow(tensors, name, op, prescale_factor, postscale_factor, process_set,
               device_dense='', device_sparse=''):
    from horovod.tensorflow.collectives import grouped_allreduce
    return grouped_allreduce(list(tensors), op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, process_set=process_set,
                             name=name, device_dense=device_dense, device_sparse=device_sparse)


def torch(tensors, name, op, prescale_factor, postscale_factor, process_set):
    import horovod.torch as hvd_torch
    tensors = [t.contiguous() for t in tensors]
    return list(hvd_torch.grouped_allreduce(tensors, name=name, op=op,
                                            prescale_factor=prescale_factor,
                                            postscale_factor=postscale_factor,
                                            process_set=process_set))


def jax(tensors, name, op, prescale_factor, postscale_factor, process_set):
    import jax as _jax
    from jax.experimental import io_callback

    def host(*arrays):
        out = numpy_ops.grouped_allreduce([np.asarray(a) for a in arrays], op=op,
                                          prescale_factor=prescale_factor,
                                          postscale_factor=postscale_factor,
                                          process_set=process_set, name=name)
        return tuple(out)

    shapes = tuple(_jax.ShapeDtypeStruct(t.shape, t.dtype) for t in tensors)
    # ordered=True: the callback runs exactly once per step, in program order, never elided
    # or duplicated by XLA (a collective must be issued the same number of times everywhere).
    return list(io_callback(host, shapes, *tensors, ordered=True))


def for_backend(name):
    """The reducer for a Keras backend name ('tensorflow', 'torch', 'jax')."""
    try:
        return {'tensorflow': tensorflow, 'torch': torch, 'jax': jax}[name]
    except KeyError:
        raise NotImplementedError(
            'Horovod DistributedOptimizer supports the Keras backends tensorflow, torch and jax; '
            'this Keras runs on {!r}.'.format(name)) from None
