"""Collectives on values (``hvd.allreduce(value)`` and friends in the Keras modules): any
tensor-compatible value in, a tensor of the Keras backend out, computed now.

On TensorFlow (Keras 3 on TF, tf-keras) the value becomes ``tf.constant(value, name=name)`` and
goes through ``horovod.tensorflow`` (its names, dtypes and compression); in TF1 graph mode the
result's value is computed through the Keras session and returned. On the PyTorch and JAX
backends the value goes through the core as a numpy array and comes back as a backend tensor.
"""

import numpy as np

from horovod._keras import numpy_ops
from horovod.common.process_sets import global_process_set


def _tf(backend):
    return backend.name == 'tensorflow'


def _evaluated(tensor):
    """The tensor in eager mode; its value, computed through the Keras session, in TF1 graph
    mode."""
    import tensorflow as tf
    if tf.executing_eagerly():
        return tensor
    return tf.compat.v1.keras.backend.get_session().run(tensor)


def allreduce(backend, value, name, op, prescale_factor, postscale_factor, compression,
              process_set=global_process_set):
    if _tf(backend):
        import tensorflow as tf
        from horovod.tensorflow.collectives import allreduce as tf_allreduce
        return _evaluated(tf_allreduce(tf.constant(value, name=name), name=name, op=op,
                                       prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor,
                                       compression=compression, process_set=process_set))
    tensor = backend.to_tensor(np.asarray(value))
    compressed, ctx = compression.compress(tensor)
    out = numpy_ops.allreduce(backend.to_numpy(compressed), op=op,
                              prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                              process_set=process_set, name=name)
    return compression.decompress(backend.to_tensor(out), ctx)


def allgather(backend, value, name, process_set=global_process_set):
    if _tf(backend):
        import tensorflow as tf
        from horovod.tensorflow.mpi_ops import allgather as tf_allgather
        return _evaluated(tf_allgather(tf.constant(value, name=name), name=name,
                                       process_set=process_set))
    return backend.to_tensor(numpy_ops.allgather(np.asarray(value), process_set=process_set,
                                                 name=name))


def broadcast(backend, value, root_rank, name, process_set=global_process_set):
    if _tf(backend):
        import tensorflow as tf
        from horovod.tensorflow.mpi_ops import broadcast as tf_broadcast
        return _evaluated(tf_broadcast(tf.constant(value, name=name), root_rank, name=name,
                                       process_set=process_set))
    return backend.to_tensor(numpy_ops.broadcast(np.asarray(value), root_rank,
                                                 process_set=process_set, name=name))


def reducescatter(backend, value, name, op, process_set=global_process_set):
    if _tf(backend):
        import tensorflow as tf
        from horovod.tensorflow.collectives import reducescatter as tf_reducescatter
        return _evaluated(tf_reducescatter(tf.constant(value, name=name), name=name, op=op,
                                           process_set=process_set))
    return backend.to_tensor(numpy_ops.reducescatter(np.asarray(value), op=op,
                                                     process_set=process_set, name=name))


def broadcast_global_variables(backend, root_rank):
    """TF1 graph mode (tf-keras with eager execution disabled): broadcasts every global
    variable now, through the Keras session. Elsewhere there are no global variables."""
    if _tf(backend):
        import tensorflow as tf
        if not tf.executing_eagerly():
            from horovod.tensorflow.functions import broadcast_global_variables as bgv
            session = tf.compat.v1.keras.backend.get_session()
            return session.run(bgv(root_rank))
    raise RuntimeError('hvd.broadcast_global_variables() needs TF1 graph mode (global '
                       'variables); with eager TensorFlow, Keras 3 or another backend use '
                       'hvd.callbacks.BroadcastGlobalVariablesCallback(0) in model.fit, or '
                       'broadcast the model and optimizer variables yourself.')
