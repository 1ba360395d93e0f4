"""TensorFlow collectives on the Horovod core: the raw, differentiable operations.

Every collective here is one op, and one call into the core, for a whole group of tensors, made
by ``horovod.tensorflow._execute`` (Horovod's TensorFlow kernel library, or ``tf.py_function``;
eagerly and inside a graph or ``tf.function``, where the op is stateful and keeps its program
order). This module adds what TensorFlow users expect on top: Horovod's naming rules, gradients
(``tf.custom_gradient``), output shapes and errors that are ``tf.errors`` as well as Horovod's
exceptions.

Naming (the matching key across ranks): eagerly, ``name`` as given, or a generated one-off name
counted per call and process set; inside a graph, the graph node name Horovod would give
(``HorovodAllreduce_<tensor name>`` under the current name scope, unique in the graph), or only
its last component with ``ignore_name_scope=True``. The core sees ``<op prefix><name>``
(``allreduce.``, ``allgather.``, ...), as for every adapter.
"""

import re

import tensorflow as tf

from horovod.common import basics as _basics_mod
from horovod.common import ops as _ops
from horovod.common.basics import *  # noqa: F401,F403 (the basics, re-exported)
from horovod.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from horovod.common.process_sets import (ProcessSet, global_process_set,  # noqa: F401
                                         add_process_set, remove_process_set)
from horovod.common.util import check_installed_version
from horovod.tensorflow import _execute

_core = _basics_mod._core

# The core is not compiled against TensorFlow: every version is accepted.
check_installed_version('tensorflow', tf.__version__)


# Generated names of unnamed collectives count from zero again after every init and shutdown,
# so that they match across ranks after an elastic reset.
_basics_mod.on_init_and_shutdown(_execute.reset_counter)

# ---- dtypes --------------------------------------------------------------------------------------

_REDUCE_DTYPES = frozenset([tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.bfloat16,
                            tf.float32, tf.float64])
_MOVE_DTYPES = _REDUCE_DTYPES | frozenset([tf.uint16, tf.int16, tf.bool])
_REDUCESCATTER_DTYPES = frozenset([tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
                                   tf.float64])


def _check_dtypes(tensors, allowed, what):
    for t in tensors:
        if t.dtype not in allowed:
            raise _execute.invalid_argument(
                '{}: tensor type {} is not supported (supported: {}).'.format(
                    what, t.dtype.name, ', '.join(sorted(d.name for d in allowed))))


def _as_tensor(value):
    """``value`` as a tensor; tensors pass through without a conversion call (a few
    microseconds of TensorFlow dispatch per call, which the eager path feels)."""
    return value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(value)


# ---- naming --------------------------------------------------------------------------------------

_INVALID_NAME_CHARS = re.compile(r'[^a-zA-Z0-9_]')


def _normalize_name(name):
    """Horovod's rule for default names: every character outside [A-Za-z0-9_] becomes '_'."""
    return _INVALID_NAME_CHARS.sub('_', name)


def _executing_eagerly():
    return tf.executing_eagerly()


def _core_name(prefix, default_base, tensor, name, ignore_name_scope, psid=0):
    """(full core name, one_off) for one collective; see the module docstring. Unnamed eager
    calls are counted per process set (``<prefix>noname.<n>`` on the global set,
    ``<prefix>noname.<set id>.<n>`` on others)."""
    if _executing_eagerly():
        if name:
            return prefix + name, False
        count = _execute.next_count(psid)
        suffix = '{}.{}'.format(psid, count) if psid else str(count)
        return prefix + _ops.UNNAMED + suffix, True
    base = name or default_base + _normalize_name(tensor.name)
    full = tf.compat.v1.get_default_graph().unique_name(base)
    if ignore_name_scope:
        full = full.rsplit('/', 1)[-1]
    return prefix + full, False


def _grouped_base(default_base, tensors):
    first, last = tensors[0], tensors[-1]
    if _executing_eagerly():
        return default_base
    return '{}{}_{}'.format(default_base, _normalize_name(first.name), _normalize_name(last.name))


def _group_name(op, title, tensors, name, ignore_name_scope, psid, single):
    """(full core name, one_off) of a single (``allreduce.``, ``HorovodAllreduce_<tensor>``) or
    grouped (``grouped_allreduce.``, ``HorovodGroupedAllreduce_<first>_<last>``) collective;
    ``op`` is the upper-case name of its prefix in horovod.common.ops, ``title`` its name in
    Horovod's node names."""
    if single:
        return _core_name(getattr(_ops, op), 'Horovod{}_'.format(title), tensors[0], name,
                          ignore_name_scope, psid)
    base = _grouped_base('HorovodGrouped{}_'.format(title), tensors)
    return _core_name(getattr(_ops, 'GROUPED_' + op), base, tensors[0], name, ignore_name_scope,
                      psid)


def _ps_id(process_set):
    pid = process_set.process_set_id
    if pid is None:
        raise ValueError('Process set {} has not been registered (use hvd.add_process_set or '
                         'hvd.init(process_sets=...)).'.format(process_set))
    return pid


def _set_size_and_rank(process_set):
    """(size, rank within the set) for this process; eager or graph-construction time."""
    if process_set.process_set_id == 0:
        return _core.size(), _core.rank()
    return process_set.size(), process_set.rank()


# ---- allreduce -----------------------------------------------------------------------------------

def _placed_on_gpu(tensor):
    """Whether the op on ``tensor`` runs on a GPU: its device names one, or (a graph tensor not
    placed yet) TensorFlow has a GPU, where it places Horovod's ops as Horovod's own placer did."""
    device = getattr(tensor, 'device', '') or ''
    if device:
        return ':GPU:' in device
    return bool(tf.config.list_logical_devices('GPU'))


def _adasum_checks(op, process_set, tensors=()):
    """Horovod's Adasum refusals (horovod.common.ops.check_adasum); tensors placed on a GPU in a
    build with CUDA run the GPU Adasum, whose conditions are on hosts."""
    if op != Adasum:
        return
    gpu = _core.cuda_built() and any(_placed_on_gpu(t) for t in tensors)
    _ops.check_adasum(op, process_set.process_set_id, _core.size, gpu=gpu,
                      local_size=_core.local_size, homogeneous=_core.is_homogeneous)


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """Reduces ``tensor`` over ``process_set``: postscale * OP(prescale * tensor). Returns a new
    tensor of the same shape and dtype. Differentiable (the gradient is the allreduce of the
    gradient with the same op and factors)."""
    return _grouped_allreduce([tensor], name=name, op=op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor,
                              ignore_name_scope=ignore_name_scope, process_set=process_set,
                              _single=True)[0]


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set, _single=False):
    """Allreduce of a list of tensors as one unit (one crossing into the core, one negotiation,
    fused when they fit). Returns a list. Differentiable."""
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        return []
    _check_dtypes(tensors, _REDUCE_DTYPES, 'allreduce')
    _adasum_checks(op, process_set, tensors)
    psid = _ps_id(process_set)
    full, one_off = _group_name('ALLREDUCE', 'Allreduce', tensors, name, ignore_name_scope, psid,
                                _single)

    def forward(*xs):
        return _execute.allreduce(list(xs), full, op, prescale_factor, postscale_factor, psid,
                                  one_off, single=_single)

    def backward(*dys):
        return _grouped_allreduce(list(dys), op=op, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)

    return _with_gradient(forward, backward, tensors)


def _with_gradient(forward, backward, tensors):
    """forward(*tensors) -> list of outputs, with backward(*output_grads) -> list of input grads
    registered, when a tape or graph might differentiate through it."""
    if not _execute.might_record(tensors):
        return forward(*tensors)

    @tf.custom_gradient
    def op(*xs):
        ys = forward(*xs)

        def grad(*dys):
            dys = [tf.zeros_like(y) if dy is None else dy for y, dy in zip(ys, dys)]
            return backward(*dys)

        return ys, grad

    return list(op(*tensors))


# ---- allgather -----------------------------------------------------------------------------------

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's ``tensor`` along dimension 0 in set-rank order (first dimensions
    may differ, the others must match). Differentiable."""
    return grouped_allgather([tensor], name=name, ignore_name_scope=ignore_name_scope,
                             process_set=process_set, _single=True)[0]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set, _single=False):
    """Allgather of each tensor of a list, negotiated as one unit. Returns a list."""
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        return []
    _check_dtypes(tensors, _MOVE_DTYPES, 'allgather')
    psid = _ps_id(process_set)
    full, one_off = _group_name('ALLGATHER', 'Allgather', tensors, name, ignore_name_scope, psid,
                                _single)

    def forward(*xs):
        return _execute.allgather(list(xs), full, psid, one_off, single=_single)

    def backward(*dys):
        reduced = _grouped_allreduce(list(dys), op=Average, process_set=process_set)
        grads = []
        for x, g in zip(tensors, reduced):
            dims = allgather(tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1]),
                             process_set=process_set)
            r = process_set_rank_op(process_set)
            offset = tf.reduce_sum(dims[:r])
            grads.append(tf.slice(g, tf.concat([[offset], tf.zeros([tf.rank(g) - 1], tf.int64)], 0),
                                  tf.shape(x, out_type=tf.int64)))
        return grads

    return _with_gradient(forward, backward, tensors)


# ---- broadcast -----------------------------------------------------------------------------------

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Returns root's ``tensor`` on every rank of the set (``root_rank`` is a global rank).
    Differentiable: the gradient is the Average-allreduce of the gradient, zero except on
    root."""
    tensor = _as_tensor(tensor)
    _check_dtypes([tensor], _MOVE_DTYPES, 'broadcast')
    psid = _ps_id(process_set)
    full, one_off = _core_name(_ops.BROADCAST, 'HorovodBroadcast_', tensor, name,
                               ignore_name_scope, psid)

    def forward(x):
        return _execute.broadcast([x], root_rank, full, psid, one_off)

    def backward(dy):
        reduced = _allreduce(dy, op=Average, process_set=process_set)
        if _executing_eagerly():
            return [reduced if _core.rank() == root_rank else reduced * 0]
        is_root = tf.cast(tf.equal(rank_op(), root_rank), reduced.dtype)
        return [reduced * is_root]

    return _with_gradient(forward, backward, [tensor])[0]


# ---- alltoall ------------------------------------------------------------------------------------

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends ``splits[i]`` rows of dimension 0 to set rank i (None: equal split) and
    concatenates what every rank sends here. Returns ``output`` when ``splits`` is None, else
    ``(output, received_splits)`` (int32: the rows received from each rank). Differentiable."""
    tensor = _as_tensor(tensor)
    _check_dtypes([tensor], _MOVE_DTYPES, 'alltoall')
    psid = _ps_id(process_set)
    full, one_off = _core_name(_ops.ALLTOALL, 'HorovodAlltoall_', tensor, name, ignore_name_scope,
                               psid)
    split_tensor = None if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int32)
    received = []

    def forward(x):
        out, recv = _execute.alltoall(x, split_tensor, full, psid, one_off)
        received.append(recv)
        return [out]

    def backward(dy):
        grad, _ = alltoall(dy, splits=received[0], process_set=process_set)
        return [grad]

    output = _with_gradient(forward, backward, [tensor])[0]
    return output if splits is None else (output, received[0])


# ---- reducescatter -------------------------------------------------------------------------------

def _check_reducescatter_op(op):
    if op not in (Sum, Average):
        raise NotImplementedError('Reducescatter only supports Sum and Average.')


def reducescatter(tensor, name=None, op=Average, ignore_name_scope=False,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces ``tensor`` over the set; each rank keeps its block of dimension 0 (the first
    ``dim0 % size`` ranks get one row more). Only Sum and Average. Differentiable."""
    return grouped_reducescatter([tensor], name=name, op=op, ignore_name_scope=ignore_name_scope,
                                 process_set=process_set, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, _single=True)[0]


def grouped_reducescatter(tensors, name=None, op=Average, ignore_name_scope=False,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, _single=False):
    """Reducescatter of each tensor of a list, negotiated as one unit. Returns a list."""
    _check_reducescatter_op(op)
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        return []
    _check_dtypes(tensors, _REDUCESCATTER_DTYPES, 'reducescatter')
    psid = _ps_id(process_set)
    full, one_off = _group_name('REDUCESCATTER', 'Reducescatter', tensors, name,
                                ignore_name_scope, psid, _single)
    set_size, set_rank = _set_size_and_rank(process_set)

    def forward(*xs):
        return _execute.reducescatter(list(xs), full, op, prescale_factor, postscale_factor, psid,
                                      one_off, set_size, set_rank, single=_single)

    def backward(*dys):
        # Horovod's rule (as torch): Sum scales the gradient by the set size, Average not.
        scale = prescale_factor * postscale_factor
        if op == Sum:
            scale *= set_size
        grads = [dy * tf.cast(scale, dy.dtype) if scale != 1.0 else dy for dy in dys]
        return grouped_allgather(grads, process_set=process_set)

    return _with_gradient(forward, backward, tensors)


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False,
                   process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Horovod's raw reducescatter (no compression; the default op is Sum). Kept for code that
    calls ``hvd._reducescatter``; ``hvd.reducescatter`` is the public entry."""
    return reducescatter(tensor, name=name, op=op, ignore_name_scope=ignore_name_scope,
                         process_set=process_set, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor)


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False,
                           process_set=global_process_set, prescale_factor=1.0,
                           postscale_factor=1.0):
    """Horovod's raw grouped reducescatter (the default op is Sum)."""
    return grouped_reducescatter(tensors, name=name, op=op, ignore_name_scope=ignore_name_scope,
                                 process_set=process_set, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor)


# ---- join and topology ops -----------------------------------------------------------------------

def join():
    """Blocks until every rank has called join (ranks that joined contribute zeros to the
    collectives the others still run). Returns an int32 scalar: the last rank that joined."""
    return _execute.join()


def size_op(process_set_id=0, name=None):
    """The size of a process set as an int32 scalar evaluated when the graph runs."""
    return _execute.topology('process_set_size' if process_set_id else 'size', process_set_id)


def local_size_op(name=None):
    return _execute.topology('local_size')


def rank_op(name=None):
    return _execute.topology('rank')


def local_rank_op(name=None):
    return _execute.topology('local_rank')


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank belongs to the process set, 0 if not, -1 for an unknown set."""
    return _execute.topology('process_set_included', process_set_id)


def process_set_rank_op(process_set):
    """This rank's index within ``process_set`` as an int32 scalar (graph-run time)."""
    pid = process_set.process_set_id
    return _execute.topology('process_set_rank' if pid else 'rank', pid or 0)
