"""MXNet collectives on the Horovod core, scheduled by MXNet's dependency engine
(``horovod.mxnet._engine``): allreduce, grouped_allreduce, broadcast and reducescatter return at
once, and their results are ordered by the engine like any MXNet operation's. allgather,
grouped_allgather and alltoall wait for their inputs and block until done (their output shape
depends on the other ranks).

Tensors reach the core as DLPack views made by ``MXNDArrayToDLPack`` (what
``mx.nd.to_dlpack_for_read`` / ``to_dlpack_for_write`` call, without their wait: inside the
engine operation the inputs are ready and the outputs are this operation's alone).
Results the core allocates come back through ``mx.nd.from_dlpack`` (no copy).

Naming: ``<op prefix><name>``, or ``<op prefix>mxnet.noname.<n>`` for unnamed calls, ``n``
counting this adapter's calls in program order (reset by init and shutdown).
"""

import ctypes

import mxnet as mx
import numpy as np
from mxnet.base import _LIB, check_call
from mxnet.ndarray import ndarray as _nd

from horovod.common.call_names import CallNamer
from horovod.common import basics as _basics_mod
from horovod.common import ops as _ops
from horovod.common.basics import *  # noqa: F401,F403 (the basics, re-exported)
from horovod.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from horovod.common.process_sets import (ProcessSet, global_process_set,  # noqa: F401
                                         add_process_set, remove_process_set)
from horovod.common.util import (check_installed_version, get_average_backwards_compatibility_fun)
from horovod.mxnet import _engine

_core = _basics_mod._core

# Nothing is compiled against MXNet: every version is accepted (the check only records it).
check_installed_version('mxnet', mx.__version__)

# (full core name, one_off), taken in program order when the call is made.
_name = CallNamer('mxnet')


class _ReduceOps:
    Average = Average
    Sum = Sum


handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_ReduceOps)


def synchronize():
    """Waits for every Horovod operation pushed so far (and all MXNet work); raises the failure
    of any of them as MXNetError."""
    _engine.synchronize()


def _view(array):
    """A DLPack capsule over ``array``'s memory, without waiting (see the module docstring)."""
    handle = ctypes.c_void_p()
    check_call(_LIB.MXNDArrayToDLPack(array.handle, ctypes.byref(handle)))
    return ctypes.pythonapi.PyCapsule_New(handle, _nd._c_str_dltensor, _nd._c_dlpack_deleter)


def _check_inputs(tensors, process_set):
    _engine.raise_pending()
    if not _core.is_initialized():
        raise ValueError('Horovod has not been initialized; use hvd.init().')
    if process_set.process_set_id is None:
        raise ValueError('Process set provided does not exist, or has not been registered.')
    for t in tensors:
        if not isinstance(t, mx.nd.NDArray):
            raise ValueError('Horovod expects an mxnet NDArray, got {}'.format(type(t).__name__))
        if t.stype != 'default':
            raise ValueError('Horovod supports dense NDArrays only, got storage type {}'.format(
                t.stype))


def _check_op(op, process_set):
    # Adasum runs as in the other adapters (Horovod's MXNet binding refused it).
    _ops.check_adasum(op, process_set.process_set_id, _core.size)


# ---- allreduce ----------------------------------------------------------------------------------

def _push_allreduce(inputs, outputs, name, priority, op, pre, post, process_set):
    _check_op(op, process_set)
    grouped = len(inputs) > 1
    full, one_off = _name(_ops.GROUPED_ALLREDUCE if grouped else _ops.ALLREDUCE, name)
    ps_id = process_set.process_set_id
    in_place = outputs is None

    def start():
        ins = [_view(t) for t in inputs]
        outs = None if in_place else [_view(t) for t in outputs]
        if grouped:
            return _core.grouped_allreduce_async(ins, outs, full, op, pre, post, ps_id, one_off)
        return _core.allreduce_async(ins[0], None if in_place else outs[0], full, op, pre, post,
                                     ps_id, one_off)

    reads = [] if in_place else list(inputs)
    writes = list(inputs) if in_place else list(outputs)
    _engine.push(start, reads, writes, priority, full, watch=() if in_place else outputs)


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, op=None):
    """Returns a new NDArray: postscale_factor * OP(prescale_factor * tensor) over the ranks of
    ``process_set`` (Average divides by the set size). Asynchronous in the MXNet engine;
    ``priority``: higher runs earlier."""
    op = handle_average_backwards_compatibility(op, average)
    _check_inputs([tensor], process_set)
    output = _engine.result(mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype))
    _push_allreduce([tensor], [output], name, priority, op, prescale_factor, postscale_factor,
                    process_set)
    return output


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place allreduce of ``tensor``; returns ``tensor``."""
    op = handle_average_backwards_compatibility(op, average)
    _check_inputs([tensor], process_set)
    _push_allreduce([tensor], None, name, priority, op, prescale_factor, postscale_factor,
                    process_set)
    return tensor


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, op=None):
    """Allreduce of a list of NDArrays negotiated as one unit; returns a list of new NDArrays."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    _check_inputs(tensors, process_set)
    if not tensors:
        return []
    outputs = [_engine.result(mx.nd.empty(t.shape, ctx=t.context, dtype=t.dtype))
               for t in tensors]
    _push_allreduce(tensors, outputs, name, priority, op, prescale_factor, postscale_factor,
                    process_set)
    return outputs


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place grouped allreduce; returns ``tensors``."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    _check_inputs(tensors, process_set)
    if tensors:
        _push_allreduce(tensors, None, name, priority, op, prescale_factor, postscale_factor,
                        process_set)
    return tensors


# ---- allgather / alltoall (blocking) ------------------------------------------------------------

def _ready(tensors):
    for t in tensors:
        t.wait_to_read()


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenation of every rank's ``tensor`` along dimension 0, in set-rank order (first
    dimensions may differ). Blocks until done."""
    return grouped_allgather([tensor], name, priority, process_set)[0]


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """Allgather of each NDArray of a list; returns a list. Blocks until done."""
    tensors = list(tensors)
    _check_inputs(tensors, process_set)
    if not tensors:
        return []
    _ready(tensors)
    grouped = len(tensors) > 1
    full, one_off = _name(_ops.GROUPED_ALLGATHER if grouped else _ops.ALLGATHER, name)
    ps_id = process_set.process_set_id
    views = [_view(t) for t in tensors]
    if grouped:
        work = _core.grouped_allgather_async(views, full, ps_id, one_off)
    else:
        work = _core.allgather_async(views[0], full, ps_id, one_off)
    work.wait()
    return [mx.nd.from_dlpack(o.__dlpack__()) for o in work.outputs()]


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends ``splits[i]`` rows of dimension 0 to set rank i (None: equal parts) and concatenates
    what arrives. Returns the output, or ``(output, received_splits)`` when ``splits`` is given.
    Blocks until done."""
    _check_inputs([tensor], process_set)
    split_values = None
    if splits is not None:
        values = np.asarray(splits.asnumpy() if isinstance(splits, mx.nd.NDArray) else splits)
        if values.ndim != 1:
            raise ValueError('alltoall expects a 1D splits tensor')
        if values.dtype.kind not in 'iu':
            raise ValueError('alltoall expects splits to contain 32-bit integer elements.')
        split_values = [int(s) for s in values.tolist()]
    _ready([tensor])
    full, one_off = _name(_ops.ALLTOALL, name)
    work = _core.alltoall_async(_view(tensor), split_values, full, process_set.process_set_id,
                                one_off)
    work.wait()
    output = mx.nd.from_dlpack(work.outputs()[0].__dlpack__())
    if splits is None:
        return output
    return output, mx.nd.array(work.received_splits(), dtype='int32')


# ---- broadcast ----------------------------------------------------------------------------------

def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """Overwrites ``tensor`` with rank ``root_rank``'s (a global rank); returns ``tensor``.
    Asynchronous in the MXNet engine."""
    return _broadcast(tensor, root_rank, name, priority, process_set, ())


def _broadcast(tensor, root_rank, name, priority, process_set, watch):
    _check_inputs([tensor], process_set)
    full, one_off = _name(_ops.BROADCAST, name)
    ps_id = process_set.process_set_id

    def start():
        return _core.broadcast_async(_view(tensor), root_rank, full, ps_id, one_off)

    _engine.push(start, [], [tensor], priority, full, watch)
    return tensor


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """Returns a new NDArray holding rank ``root_rank``'s ``tensor``."""
    _check_inputs([tensor], process_set)
    output = _engine.result(tensor.copy())
    return _broadcast(output, root_rank, name, priority, process_set, (output,))


# ---- reducescatter ------------------------------------------------------------------------------

def _scatter_shape(tensor, process_set):
    if len(tensor.shape) == 0:
        raise ValueError('Reducescatter does not support scalar inputs')
    if process_set.process_set_id == 0:
        n, r = _core.size(), _core.rank()
    else:
        n, r = process_set.size(), process_set.rank()
    d = tensor.shape[0]
    return (d // n + (1 if r < d % n else 0),) + tuple(tensor.shape[1:])


def grouped_reducescatter(tensors, op=Average, name=None, priority=0,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reduces each NDArray over the set; this rank keeps its block of dimension 0 (set rank r
    of n gets d//n + 1 rows if r < d % n, else d//n). Returns a list of new NDArrays."""
    assert op in (Average, Sum), 'Reducescatter only supports Average and Sum.'
    tensors = list(tensors)
    _check_inputs(tensors, process_set)
    if not tensors:
        return []
    outputs = [_engine.result(mx.nd.empty(_scatter_shape(t, process_set), ctx=t.context,
                                          dtype=t.dtype)) for t in tensors]
    grouped = len(tensors) > 1
    full, one_off = _name(_ops.GROUPED_REDUCESCATTER if grouped else _ops.REDUCESCATTER, name)
    ps_id = process_set.process_set_id

    def start():
        ins, outs = [_view(t) for t in tensors], [_view(o) for o in outputs]
        if grouped:
            return _core.grouped_reducescatter_async(ins, outs, full, op, prescale_factor,
                                                     postscale_factor, ps_id, one_off)
        return _core.reducescatter_async(ins[0], outs[0], full, op, prescale_factor,
                                         postscale_factor, ps_id, one_off)

    _engine.push(start, tensors, outputs, priority, full, outputs)
    return outputs


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """See grouped_reducescatter."""
    return grouped_reducescatter([tensor], op, name, priority, process_set, prescale_factor,
                                 postscale_factor)[0]
