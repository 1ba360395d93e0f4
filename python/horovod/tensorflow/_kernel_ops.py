"""The kernel-library way for collectives to reach the core (the default).

``_horovod_tf_ops.so`` is built with Horovod, not against TensorFlow: it declares the part of
TensorFlow's stable C API it uses and resolves it at load time, registers the ops
``HorovodAllreduce``, ``HorovodAllgather``, ``HorovodBroadcast``, ``HorovodAlltoall``,
``HorovodReducescatter``, ``HorovodJoin`` and ``HorovodTopology`` with CPU kernels (and, when the
core has the CUDA backend, GPU kernels for the five collectives), and drives
the engine of ``horovod._core`` through the table ``_core`` hands it. Each node handles
a whole group of tensors (one crossing into the core per gradient group), runs eagerly and in
graphs alike, and reduces in place when TensorFlow lets an output reuse its input's buffer.

``load()`` raises ``ImportError`` (naming the reason) when the library cannot be used.
"""

import ctypes
import os
import warnings

import tensorflow as tf

from horovod.common import basics as _basics_mod
from horovod.tensorflow._errors import translated as _translated

_core = _basics_mod._core
_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), '_horovod_tf_ops.so')
_ops = None
_native = None
# Whether kernels return their thread to TensorFlow while their collective runs (see load()).
deferred_done = False


def load():
    """Loads and binds the kernel library (once)."""
    global _ops
    if _ops is not None:
        return
    if not os.path.exists(_LIBRARY):
        raise ImportError('{} is missing (horovod was built without it)'.format(_LIBRARY))
    try:
        ops = tf.load_op_library(_LIBRARY)
    except (tf.errors.OpError, OSError) as e:
        raise ImportError('TensorFlow could not load {}: {}'.format(_LIBRARY, e)) from None
    native = ctypes.CDLL(_LIBRARY)
    native.horovod_tf_load_error.restype = ctypes.c_char_p
    native.horovod_tf_bind.restype = ctypes.c_char_p
    native.horovod_tf_bind.argtypes = [ctypes.c_void_p]
    error = native.horovod_tf_load_error().decode()
    if not error:
        error = native.horovod_tf_bind(_core.api_table_address()).decode()
    if not error and _core.cuda_built():
        # GPU kernels: TensorFlow then runs the collectives of GPU tensors on the GPU (the CUDA
        # backend), not on the CPU with copies around them (docs/gpu.md, TensorFlow).
        native.horovod_tf_register_gpu_kernels.restype = ctypes.c_char_p
        error = native.horovod_tf_register_gpu_kernels().decode()
    if error:
        raise ImportError('the Horovod TensorFlow kernels cannot be used with TensorFlow {}: {}'
                          .format(tf.__version__, error))
    # The library checks, once, that it can finish a kernel after its compute call returned
    # (it keeps a copy of TensorFlow's done callback): then a running Horovod op holds no
    # TensorFlow thread. Otherwise each running op holds one until its collective completes.
    native.horovod_tf_deferred_done.restype = ctypes.c_int
    native.horovod_tf_deferred_done.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    why = ctypes.c_char_p()
    global deferred_done
    deferred_done = bool(native.horovod_tf_deferred_done(ctypes.byref(why)))
    if not deferred_done and os.environ.get('HOROVOD_TF_SYNC_KERNELS') != '1':
        warnings.warn('Horovod: TensorFlow {}: {}; each running Horovod op holds an inter-op '
                      'thread until its collective completes (a graph with more independent '
                      'Horovod ops than inter-op threads can stall). See docs/tensorflow.md.'
                      .format(tf.__version__, (why.value or b'').decode()))
    native.horovod_tf_deferred_ops.restype = ctypes.c_uint64
    global _native
    _native = native
    _ops = ops


def deferred_ops():
    """How many ops finished after their kernel had returned its thread (for tests)."""
    return _native.horovod_tf_deferred_ops() if _native is not None else 0


def _independent(outputs):
    """Inside a tf.function, lets the Horovod op that made ``outputs`` run without the program-order
    chain TensorFlow puts between stateful ops (it still always runs). Ranks may then start
    independent collectives in any order, and the engine sees them together and fuses them,
    as in a TF1 graph. Data dependencies still order everything that needs an order."""
    if tf.executing_eagerly() or not outputs:
        return outputs
    first = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
    acd = getattr(first.graph, 'experimental_acd_manager', None)
    if acd is not None:
        acd.run_independently(first.op)
    return outputs


def _eager_errors(fn):
    """Raises eager failures of a Horovod kernel as Horovod's error classes (graph-mode failures
    surface as TensorFlow's own errors when the graph runs)."""
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except tf.errors.OpError as e:
            raise _translated(e) from None
    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


@_eager_errors
def allreduce(tensors, name, op, prescale, postscale, psid, one_off, single=False):
    return _independent(list(_ops.horovod_allreduce(
        tensors, hvd_name=name, reduce_op=op, prescale=prescale, postscale=postscale,
        process_set=psid, one_off=one_off, grouped=not single, name='HorovodAllreduce')))


@_eager_errors
def allgather(tensors, name, psid, one_off, single=False):
    outs = _independent(list(_ops.horovod_allgather(tensors, hvd_name=name, process_set=psid,
                                                    one_off=one_off, grouped=not single,
                                                    name='HorovodAllgather')))
    for out, t in zip(outs, tensors):
        if not tf.executing_eagerly() and t.shape.rank is not None:
            out.set_shape(tf.TensorShape([None]).concatenate(t.shape[1:]))
    return outs


@_eager_errors
def broadcast(tensors, root_rank, name, psid, one_off):
    return broadcast_many(tensors, root_rank, [name], psid)


@_eager_errors
def broadcast_many(tensors, root_rank, names, psid):
    if not tensors:
        return []
    return _independent(list(_ops.horovod_broadcast(tensors, hvd_name='\n'.join(names),
                                                    root_rank=root_rank, process_set=psid,
                                                    name='HorovodBroadcast')))


@_eager_errors
def alltoall(tensor, splits, name, psid, one_off):
    if splits is None:
        splits = tf.zeros([0], tf.int32)
    out, received = _ops.horovod_alltoall(tensor, tf.reshape(splits, [-1]), hvd_name=name,
                                          process_set=psid, one_off=one_off,
                                          name='HorovodAlltoall')
    _independent([out])
    if not tf.executing_eagerly():
        if tensor.shape.rank is not None:
            out.set_shape(tf.TensorShape([None]).concatenate(tensor.shape[1:]))
        received.set_shape([None])
    return out, received


@_eager_errors
def reducescatter(tensors, name, op, prescale, postscale, psid, one_off, set_size, set_rank,
                  single=False):
    outs = list(_ops.horovod_reducescatter(tensors, hvd_name=name, reduce_op=op,
                                           prescale=prescale, postscale=postscale,
                                           process_set=psid, one_off=one_off, grouped=not single,
                                           name='HorovodReducescatter'))
    _independent(outs)
    if not tf.executing_eagerly():
        for out, t in zip(outs, tensors):
            if t.shape.rank:
                d = t.shape[0]
                rows = None if d is None else d // set_size + (1 if set_rank < d % set_size else 0)
                out.set_shape(tf.TensorShape([rows]).concatenate(t.shape[1:]))
    return outs


@_eager_errors
def join():
    out = _ops.horovod_join(name='HorovodJoin')
    if not tf.executing_eagerly():
        out.set_shape([])
    return out


@_eager_errors
def topology(what, process_set_id):
    out = _ops.horovod_topology(what=what, process_set=process_set_id, name='HorovodTopology')
    if not tf.executing_eagerly():
        out.set_shape([])
    return out
