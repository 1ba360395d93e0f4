"""How a TensorFlow collective reaches the core: one op per group of tensors.

Two ways, the same semantics (``HOROVOD_TENSORFLOW_OPS`` chooses; docs/tensorflow.md compares
their cost):
- ``kernels`` (default): Horovod's TensorFlow kernel library (``_kernel_ops``), asynchronous C++
  kernels built without TensorFlow and loaded at run time.
- ``py_function``: DLPack views eagerly and a ``tf.py_function`` op in graphs
  (``_py_function_ops``); used, with a warning saying why, when the kernel library cannot load.

Either way the ops are stateful (never pruned nor merged). Inside ``tf.function`` the kernel
library's collectives run independently of TensorFlow's program-order chain of stateful ops
(``_kernel_ops._independent``): data dependencies order them, and independent ones run side by
side. XLA cannot compile them: ``jit_compile=True`` fails
at trace time with a message saying what to do instead.
"""

import os
import warnings

import tensorflow as tf

from horovod.tensorflow import _py_function_ops
from horovod.tensorflow._errors import invalid_argument  # noqa: F401 (re-exported)

_CHOICES = ('kernels', 'py_function')


def _choose_backend():
    choice = os.environ.get('HOROVOD_TENSORFLOW_OPS', '').strip().lower() or 'auto'
    if choice not in _CHOICES + ('auto',):
        raise ValueError('HOROVOD_TENSORFLOW_OPS={!r}: expected one of {}'.format(
            choice, ', '.join(_CHOICES)))
    if choice == 'py_function':
        return _py_function_ops, 'py_function'
    from horovod.tensorflow import _kernel_ops
    try:
        _kernel_ops.load()
    except ImportError as e:
        if choice == 'kernels':
            raise
        warnings.warn('horovod.tensorflow: {}; collectives run through tf.py_function instead '
                      '(slower in graphs; set HOROVOD_TENSORFLOW_OPS=py_function to silence '
                      'this)'.format(e))
        return _py_function_ops, 'py_function'
    return _kernel_ops, 'kernels'


_backend, backend_name = _choose_backend()

# ---- one-off names -------------------------------------------------------------------------------

# Per process set: an unnamed call on a set is counted only by that set's members, so ranks
# outside it (or a one-rank set whose reduction is skipped) do not put later names out of step.
_counters = {}


def next_count(process_set_id=0):
    n = _counters.get(process_set_id, 0) + 1
    _counters[process_set_id] = n
    return n


def reset_counter():
    _counters.clear()


# ---- gradient recording --------------------------------------------------------------------------

try:  # tensorflow.python.eager.record (TF >= 2.13); older: .tape
    from tensorflow.python.eager import record as _record
except ImportError:  # pragma: no cover
    from tensorflow.python.eager import tape as _record

if hasattr(_record, 'could_possibly_record'):
    _tape_active = _record.could_possibly_record
else:  # pragma: no cover - a TensorFlow without the helper
    def _tape_active():
        return True


def might_record(tensors):
    """Whether a gradient might be taken through an op on ``tensors`` (a graph being built, or a
    GradientTape recording); otherwise the op skips the custom-gradient machinery."""
    if not tf.executing_eagerly():
        return True
    return _tape_active() and any(t.dtype.is_floating for t in tensors)


# ---- XLA -----------------------------------------------------------------------------------------

def _in_xla_context():
    try:
        from tensorflow.python.ops import control_flow_util
        return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
    except Exception:  # pragma: no cover - private helper moved
        return False


def _check_not_xla(what):
    if not tf.executing_eagerly() and _in_xla_context():
        raise invalid_argument(
            'Horovod {} cannot be compiled by XLA (tf.function(jit_compile=True)): compile the '
            'model computation only, e.g. jit-compile the forward/backward function and call '
            'Horovod (DistributedGradientTape, DistributedOptimizer) outside it, or use '
            'Keras model.compile(jit_compile=False).'.format(what))


# ---- the operations ------------------------------------------------------------------------------

def allreduce(tensors, name, op, prescale, postscale, psid, one_off, single=False):
    """Outputs: postscale * OP(prescale * tensor) per tensor (``single``: one plain allreduce,
    else one group)."""
    _check_not_xla('allreduce')
    return _backend.allreduce(tensors, name, op, prescale, postscale, psid, one_off, single)


def allgather(tensors, name, psid, one_off, single=False):
    _check_not_xla('allgather')
    return _backend.allgather(tensors, name, psid, one_off, single)


def broadcast(tensors, root_rank, name, psid, one_off):
    _check_not_xla('broadcast')
    return _backend.broadcast(tensors, root_rank, name, psid, one_off)


def broadcast_many(tensors, root_rank, names, psid):
    """Broadcasts of several tensors in flight together (one op): N variables cost one
    negotiation round, not N."""
    _check_not_xla('broadcast')
    return _backend.broadcast_many(tensors, root_rank, names, psid)


def alltoall(tensor, splits, name, psid, one_off):
    """``(output, received_splits)``; ``splits`` an int32 tensor or None (equal split)."""
    _check_not_xla('alltoall')
    return _backend.alltoall(tensor, splits, name, psid, one_off)


def reducescatter(tensors, name, op, prescale, postscale, psid, one_off, set_size, set_rank,
                  single=False):
    _check_not_xla('reducescatter')
    return _backend.reducescatter(tensors, name, op, prescale, postscale, psid, one_off,
                                  set_size, set_rank, single)


def join():
    _check_not_xla('join')
    return _backend.join()


def topology(what, process_set_id=0):
    """int32 scalar (graph-run time): size, local_size, rank, local_rank, process_set_size,
    process_set_rank or process_set_included (1/0, -1 for an unknown set)."""
    return _backend.topology(what, process_set_id)
