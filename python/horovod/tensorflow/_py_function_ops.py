"""The ``tf.py_function`` way for collectives to reach the core
(``HOROVOD_TENSORFLOW_OPS=py_function``, and the fallback when the kernel library cannot load).

Eagerly, tensors cross as DLPack views (no copy): inputs are read in place, outputs whose shape
is known (allreduce, broadcast, reducescatter) are fresh TensorFlow tensors the core writes into,
and engine-allocated outputs (allgather, alltoall) are wrapped with ``from_dlpack``. Inside a
graph the same eager code runs as one stateful ``tf.py_function`` op per group, which costs a
Python call and a conversion per tensor on every step (see docs/tensorflow.md for the measured
cost beside the kernel library).
"""

import numpy as np
import tensorflow as tf

from horovod.common import basics as _basics_mod
from horovod.common.exceptions import HorovodInternalError
from horovod.common.util import NOT_INITIALIZED_MESSAGE
from horovod.tensorflow._errors import invalid_argument, translated as _translated

_core = _basics_mod._core
_to_dlpack = tf.experimental.dlpack.to_dlpack
_from_dlpack = tf.experimental.dlpack.from_dlpack


def _is_root(root_rank):
    """Whether this rank is broadcast's root. Before init a collective fails with its own
    not-initialized error (HorovodInternalError), not with rank()'s ValueError."""
    if not _core.is_initialized():
        raise HorovodInternalError(NOT_INITIALIZED_MESSAGE)
    return _core.rank() == root_rank


def _run(start):
    """Starts an operation (start() -> Work) and waits for it, raising translated errors."""
    try:
        work = start()
        work.wait()
    except (ValueError, HorovodInternalError) as e:
        raise _translated(e) from None
    return work


# ---- graph mode ----------------------------------------------------------------------------------

def _graph_op(eager_fn, inputs, out_dtypes, what):
    """``eager_fn(*inputs)`` as one stateful graph op returning tensors of ``out_dtypes``."""
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
    """A new eager tensor of ``t``'s dtype (and shape, or ``shape``) for the core to write into:
    numpy memory wrapped without a copy (a microsecond; an eager TensorFlow op costs tens), or
    TensorFlow's own for bfloat16, which numpy cannot export."""
    dims = t.shape.as_list() if shape is None else [int(d) for d in np.asarray(shape)]
    if t.dtype == tf.bfloat16:
        return tf.raw_ops.Empty(shape=dims, dtype=t.dtype, init=False)
    return _from_dlpack(_aligned_empty(dims, t.dtype.as_numpy_dtype).__dlpack__())


# TensorFlow's kernels assume their buffers are aligned to this (Eigen's widest vectors) and abort
# the process otherwise; from_dlpack does not copy a misaligned array.
_TF_ALIGNMENT = 64


def _aligned_empty(dims, dtype):
    dtype = np.dtype(dtype)
    count = int(np.prod(dims, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + _TF_ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % _TF_ALIGNMENT
    return raw[offset:offset + count * dtype.itemsize].view(dtype).reshape(dims)


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
        out = x if _is_root(root_rank) else _empty_like(x)
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
            raise invalid_argument('Reducescatter does not support scalar inputs')

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


def topology(what, process_set_id):
    """An int32 scalar: the topology value ``what`` now (eager) or when the graph runs."""
    def eager():
        return [tf.constant(_topology_value(what, process_set_id), dtype=tf.int32)]
    if tf.executing_eagerly():
        return eager()[0]
    out = tf.py_function(eager, [], [tf.int32], name='HorovodTopology')
    out = out[0] if isinstance(out, (list, tuple)) else out
    out.set_shape([])
    return out


def _topology_value(what, psid):
    if what == 'size':
        return _core.size()
    if what == 'local_size':
        return _core.local_size()
    if what == 'rank':
        return _core.rank()
    if what == 'local_rank':
        return _core.local_rank()
    try:
        ranks = _core.process_set_ranks(psid) if psid else list(range(_core.size()))
    except ValueError:
        if what == 'process_set_included':
            return -1
        raise
    if what == 'process_set_size':
        return len(ranks)
    if what == 'process_set_rank':
        return ranks.index(_core.rank())
    if what == 'process_set_included':
        return int(_core.rank() in ranks)
    raise ValueError('unknown topology query {!r}'.format(what))


def broadcast_many(tensors, root_rank, names, psid):
    """Broadcasts of several tensors in flight together (one group op in a graph): every
    operation is started before the first wait, so N variables cost one negotiation round, not
    N."""
    def eager(*xs):
        is_root = _is_root(root_rank)
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
