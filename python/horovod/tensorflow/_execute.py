"""How a TensorFlow collective reaches the core: one call per group of tensors.

Eagerly, tensors cross as DLPack views (no copy): inputs are read in place, outputs whose shape
is known (allreduce, broadcast, reducescatter) are fresh TensorFlow tensors the core writes into,
and engine-allocated outputs (allgather, alltoall) are wrapped with ``from_dlpack``.

Inside a graph (``tf.function``, TF1 sessions) the same eager code runs as one stateful graph op
per group (``tf.py_function``): stateful ops keep their program order inside ``tf.function``, so
collectives never reorder against each other or the ops around them, and a step's gradients
cross into the core once. XLA cannot compile such an op: ``jit_compile=True`` fails at trace
time with a message saying what to do instead.

Errors are raised as classes that are both Horovod's (``ValueError``, ``HorovodInternalError``)
and TensorFlow's (``tf.errors.InvalidArgumentError``, ``FailedPreconditionError``,
``UnknownError``), so code catching either kind keeps working.
"""

import tensorflow as tf

from horovod.common import basics as _basics_mod
from horovod.common.exceptions import HorovodInternalError

_core = _basics_mod._core
_to_dlpack = tf.experimental.dlpack.to_dlpack
_from_dlpack = tf.experimental.dlpack.from_dlpack

# ---- errors --------------------------------------------------------------------------------------


class HorovodInvalidArgumentError(ValueError, tf.errors.InvalidArgumentError):
    """A bad call (bad argument, unsupported dtype, unknown process set), found before anything
    was sent."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class HorovodMismatchError(HorovodInternalError, tf.errors.FailedPreconditionError):
    """Ranks disagreed about an operation (shape, dtype, op, root, process set)."""

    def __init__(self, message):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)


class HorovodCollectiveError(HorovodInternalError, tf.errors.UnknownError):
    """A collective failed (peer lost, shutdown, transport failure)."""

    def __init__(self, message):
        tf.errors.UnknownError.__init__(self, None, None, message)


def invalid_argument(message):
    return HorovodInvalidArgumentError(message)


def _translated(e):
    message = str(e)
    if isinstance(e, (HorovodInvalidArgumentError, HorovodMismatchError,
                      HorovodCollectiveError)):
        return e
    if isinstance(e, ValueError):
        return HorovodInvalidArgumentError(message)
    if 'ismatch' in message:  # the coordinator's negotiation errors ("Mismatched ...")
        return HorovodMismatchError(message)
    return HorovodCollectiveError(message)


def _run(start):
    """Starts an operation (start() -> Work) and waits for it, raising translated errors."""
    try:
        work = start()
        work.wait()
    except (ValueError, HorovodInternalError) as e:
        raise _translated(e) from None
    return work


# ---- one-off names -------------------------------------------------------------------------------

_counter = 0


def next_count():
    global _counter
    _counter += 1
    return _counter


def reset_counter():
    global _counter
    _counter = 0


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


# ---- graph mode ----------------------------------------------------------------------------------

def _in_xla_context():
    try:
        from tensorflow.python.ops import control_flow_util
        return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
    except Exception:  # pragma: no cover - private helper moved
        return False


def _graph_op(eager_fn, inputs, out_dtypes, what):
    """``eager_fn(*inputs)`` as one stateful graph op returning tensors of ``out_dtypes``."""
    if _in_xla_context():
        raise HorovodInvalidArgumentError(
            'Horovod {} cannot be compiled by XLA (tf.function(jit_compile=True)): compile the '
            'model computation only, e.g. jit-compile the forward/backward function and call '
            'Horovod (DistributedGradientTape, DistributedOptimizer) outside it, or use '
            'Keras model.compile(jit_compile=False).'.format(what))
    outs = tf.py_function(eager_fn, list(inputs), list(out_dtypes), name='Horovod' + what)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


def _eager_or_graph(eager_fn, inputs, out_dtypes, what, shapes):
    if tf.executing_eagerly():
        return eager_fn(*inputs)
    outs = _graph_op(eager_fn, inputs, out_dtypes, what)
    for out, shape in zip(outs, shapes):
        out.set_shape(shape)
    return outs


def _empty_like(t, shape=None):
    return tf.raw_ops.Empty(shape=tf.shape(t) if shape is None else shape, dtype=t.dtype,
                            init=False)


# ---- collectives ---------------------------------------------------------------------------------

def allreduce(tensors, name, op, prescale, postscale, psid, one_off, single=False):
    def eager(*xs):
        outs = [_empty_like(x) for x in xs]
        if single:
            _run(lambda: _core.allreduce_async(_to_dlpack(xs[0]), _to_dlpack(outs[0]), name, op,
                                               prescale, postscale, psid, one_off))
        else:
            _run(lambda: _core.grouped_allreduce_async(
                [_to_dlpack(x) for x in xs], [_to_dlpack(o) for o in outs], name, op, prescale,
                postscale, psid, one_off))
        return outs

    return _eager_or_graph(eager, tensors, [t.dtype for t in tensors], 'Allreduce',
                           [t.shape for t in tensors])


def allgather(tensors, name, psid, one_off, single=False):
    def eager(*xs):
        if single:
            work = _run(lambda: _core.allgather_async(_to_dlpack(xs[0]), name, psid, one_off))
        else:
            work = _run(lambda: _core.grouped_allgather_async([_to_dlpack(x) for x in xs], name,
                                                              psid, one_off))
        return [_from_dlpack(o.__dlpack__()) for o in work.outputs()]

    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else t.shape
              for t in tensors]
    return _eager_or_graph(eager, tensors, [t.dtype for t in tensors], 'Allgather', shapes)


def broadcast(tensors, root_rank, name, psid, one_off):
    def eager(x):
        # The root only sends from its buffer, so it passes its input itself (read, never
        # written) and returns it; the other ranks receive into a fresh tensor.
        out = x if _core.rank() == root_rank else _empty_like(x)
        _run(lambda: _core.broadcast_async(_to_dlpack(out), root_rank, name, psid, one_off))
        return [out]

    return _eager_or_graph(eager, tensors, [t.dtype for t in tensors], 'Broadcast',
                           [t.shape for t in tensors])


def alltoall(tensor, splits, name, psid, one_off):
    def eager(x, *maybe_splits):
        split_list = None
        if maybe_splits:
            split_list = [int(v) for v in maybe_splits[0].numpy().reshape(-1)]
        work = _run(lambda: _core.alltoall_async(_to_dlpack(x), split_list, name, psid, one_off))
        out = _from_dlpack(work.outputs()[0].__dlpack__())
        return [out, tf.constant(work.received_splits(), dtype=tf.int32)]

    inputs = [tensor] if splits is None else [tensor, splits]
    shapes = [tf.TensorShape([None]).concatenate(tensor.shape[1:]), tf.TensorShape([None])]
    out, recv = _eager_or_graph(eager, inputs, [tensor.dtype, tf.int32], 'Alltoall', shapes)
    return out, recv


def reducescatter(tensors, name, op, prescale, postscale, psid, one_off, set_size, set_rank,
                  single=False):
    for t in tensors:
        if t.shape.rank == 0:
            raise HorovodInvalidArgumentError('Reducescatter does not support scalar inputs')

    def out_shape(x):
        shape = tf.shape(x)
        d = shape[0]
        rows = d // set_size + tf.cast(set_rank < d % set_size, d.dtype)
        return tf.concat([[rows], shape[1:]], 0)

    def eager(*xs):
        outs = [_empty_like(x, out_shape(x)) for x in xs]
        if single:
            _run(lambda: _core.reducescatter_async(_to_dlpack(xs[0]), _to_dlpack(outs[0]), name,
                                                   op, prescale, postscale, psid, one_off))
        else:
            _run(lambda: _core.grouped_reducescatter_async(
                [_to_dlpack(x) for x in xs], [_to_dlpack(o) for o in outs], name, op, prescale,
                postscale, psid, one_off))
        return outs

    shapes = []
    for t in tensors:
        d = t.shape[0]
        rows = None if d is None else d // set_size + (1 if set_rank < d % set_size else 0)
        shapes.append(tf.TensorShape([rows]).concatenate(t.shape[1:]))
    return _eager_or_graph(eager, tensors, [t.dtype for t in tensors], 'Reducescatter', shapes)


def join():
    def eager():
        work = _run(_core.join_async)
        return [tf.constant(work.join_result(), dtype=tf.int32)]
    return _eager_or_graph(eager, [], [tf.int32], 'Join', [tf.TensorShape([])])[0]


def topology_op(fn, name):
    """An int32 scalar: fn() now (eager) or when the graph runs."""
    def eager():
        return [tf.constant(fn(), dtype=tf.int32)]
    if tf.executing_eagerly():
        return eager()[0]
    out = tf.py_function(eager, [], [tf.int32], name=name)
    out = out[0] if isinstance(out, (list, tuple)) else out
    out.set_shape([])
    return out


def broadcast_many(tensors, root_rank, names, psid):
    """Broadcasts of several tensors in flight together (one group op in a graph): every
    operation is started before the first wait, so N variables cost one negotiation round, not
    N."""
    def eager(*xs):
        is_root = _core.rank() == root_rank
        outs = [x if is_root else _empty_like(x) for x in xs]
        try:
            works = [_core.broadcast_async(_to_dlpack(o), root_rank, n, psid, False)
                     for o, n in zip(outs, names)]
            for w in works:
                w.wait()
        except (ValueError, HorovodInternalError) as e:
            raise _translated(e) from None
        return outs

    if not tensors:
        return []
    return _eager_or_graph(eager, tensors, [t.dtype for t in tensors], 'Broadcast',
                           [t.shape for t in tensors])
