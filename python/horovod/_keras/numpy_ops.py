"""Collectives on host numpy arrays, straight on ``horovod._core``: the backend-neutral path the
Keras adapters use wherever no framework op is needed (variable broadcasts, metric averaging,
object broadcasts, and the JAX backend's host callbacks).

Every function blocks until its operation completed. Names: ``<op prefix><name>``; an unnamed
call gets ``<op prefix>keras.noname.<n>`` with a per-process counter (reset by ``reset``, which
runs after every init and shutdown), so unnamed calls match across ranks only when every rank
issues the same sequence of them.
"""

import numpy as np

from horovod.common.call_names import CallNamer
from horovod.common import basics as _basics
from horovod.common import ops as _ops
from horovod.common.exceptions import HorovodInternalError
from horovod.common.process_sets import global_process_set
from horovod.common.util import NOT_INITIALIZED_MESSAGE

# (full core name, one_off) for one call.
_name = CallNamer('keras')


def _psid(process_set):
    if process_set.process_set_id is None:
        raise ValueError('Process set {} has not been registered (use hvd.add_process_set or '
                         'hvd.init(process_sets=...)).'.format(process_set))
    return process_set.process_set_id


def _core():
    core = _basics._require_core()
    if not core.is_initialized():
        # Collectives before init fail as every adapter's do, as in Horovod:
        # HorovodInternalError; rank()/size() and friends raise ValueError instead.
        raise HorovodInternalError(NOT_INITIALIZED_MESSAGE)
    return core


def _wait(works):
    for w in works:
        w.wait()


def _host(array):
    """A C-contiguous, writable numpy array of ``array`` (0-d arrays are kept 0-d): the core
    takes inputs as writable views (JAX hands callbacks read-only arrays)."""
    a = np.asarray(array)
    return a if a.flags.c_contiguous and a.flags.writeable else a.copy(order='C')


def grouped_allreduce(arrays, op=_ops.Average, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set, name=None):
    """Reduces each array over the set in one call into the core; returns new arrays of the
    inputs' shapes and dtypes (inputs untouched)."""
    if not arrays:
        return []
    core = _core()
    inputs = [_host(a) for a in arrays]
    outputs = [np.empty_like(a) for a in inputs]
    full, one_off = _name(_ops.GROUPED_ALLREDUCE, name)
    _wait([core.grouped_allreduce_async(inputs, outputs, full, op, prescale_factor,
                                        postscale_factor, _psid(process_set), one_off)])
    return outputs


def allreduce(array, op=_ops.Average, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set, name=None):
    """Reduces one array over the set; returns a new array."""
    core = _core()
    x = _host(array)
    out = np.empty_like(x)
    full, one_off = _name(_ops.ALLREDUCE, name)
    _wait([core.allreduce_async(x, out, full, op, prescale_factor, postscale_factor,
                                _psid(process_set), one_off)])
    return out


def allgather(array, process_set=global_process_set, name=None):
    """Concatenates every set rank's array along dimension 0, in set-rank order."""
    core = _core()
    x = _host(array)
    full, one_off = _name(_ops.ALLGATHER, name)
    work = core.allgather_async(x, full, _psid(process_set), one_off)
    work.wait()
    return np.array(np.from_dlpack(work.outputs()[0]), copy=True)


def reducescatter(array, op=_ops.Average, process_set=global_process_set, name=None):
    """Reduces over the set; returns this rank's block of dimension 0 (the first
    ``dim0 % size`` set ranks get one row more)."""
    if op not in (_ops.Average, _ops.Sum):
        raise HorovodInternalError('Reducescatter currently only supports AVERAGE and SUM.')
    core = _core()
    x = _host(array)
    if x.ndim == 0:
        raise ValueError('Reducescatter does not support scalar inputs')
    size = len(process_set.ranks) if process_set.process_set_id else core.size()
    rank = process_set.rank() if process_set.process_set_id else core.rank()
    rows = x.shape[0] // size + (1 if rank < x.shape[0] % size else 0)
    out = np.empty((rows,) + x.shape[1:], dtype=x.dtype)
    full, one_off = _name(_ops.REDUCESCATTER, name)
    _wait([core.reducescatter_async(x, out, full, op, 1.0, 1.0, _psid(process_set), one_off)])
    return out


def broadcast_many(arrays, root_rank, names=None, process_set=global_process_set):
    """Broadcasts several arrays from ``root_rank`` (a global rank), all in flight together.
    Returns new arrays (root gets copies of its own)."""
    core = _core()
    bufs = [np.array(a, copy=True, order='C') for a in arrays]
    psid = _psid(process_set)
    works = []
    for i, b in enumerate(bufs):
        full, one_off = _name(_ops.BROADCAST, names[i] if names else None)
        works.append(core.broadcast_async(b, root_rank, full, psid, one_off))
    _wait(works)
    return bufs


def broadcast(array, root_rank, process_set=global_process_set, name=None):
    """Root's array on every rank of the set."""
    return broadcast_many([array], root_rank, [name] if name else None, process_set)[0]


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Root's (picklable) ``obj`` on every rank of the set (cloudpickle; Horovod's wire
    format: ``<name>.sz`` then ``<name>.t``)."""
    from horovod.common import objects

    def broadcast_(array, root, full_name):
        return broadcast(array, root, process_set=process_set, name=full_name)
    return objects.broadcast_object(obj, root_rank, objects.default_name(obj, name),
                                    _core().rank(), broadcast_)
