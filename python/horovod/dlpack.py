"""Collectives on any DLPack array: CuPy and JAX arrays on a GPU, NumPy arrays, anything with
``__dlpack__``/``__dlpack_device__`` (or a bare DLPack capsule). No framework is imported.

    import horovod.dlpack as hvd
    hvd.init()
    hvd.allreduce(x, op=hvd.Sum)                 # in place
    hvd.allreduce(x, out=y)                      # into y (same shape, dtype and device)
    g = cupy.from_dlpack(hvd.allgather(x))       # engine-allocated, on x's device, no copy

Every call blocks until the collective has completed (on a GPU: until the device has finished
it), so results are ready on any stream. Arrays are taken without a copy; arrays written
(in-place allreduce, ``out``, broadcast) must be writable: JAX arrays are immutable, so with JAX
pass ``out=`` a buffer of another framework, or use ``horovod.jax``. Results the engine
allocates (allgather, alltoall) come back as DLPack arrays on the input's device: wrap them with
your framework's ``from_dlpack``.

Stream ordering on a GPU: arrays are imported through ``__dlpack__()`` without a stream, which
by DLPack's contract makes the producer's pending work visible on the legacy default stream; the
collective is ordered after that stream. A caller that knows its producer stream passes
``stream=`` (a cudaStream_t as an int) instead, e.g. ``cupy.cuda.get_current_stream().ptr``.
"""

from horovod.common import basics as _basics
from horovod.common import ops as _ops
from horovod.common.basics import *  # noqa: F401,F403 (init, rank, size, ...)
from horovod.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from horovod.common.process_sets import global_process_set

_core = _basics._core
_counter = [0]


def _reset():
    _counter[0] = 0


_basics.on_init_and_shutdown(_reset)


def _name(prefix, name):
    """(full name, one_off) by Horovod's naming rule (horovod.common.ops)."""
    _counter[0] += 1
    return _ops.op_name(prefix, name, _counter[0]), not name


def _writable(array, what):
    """Refuses a JAX array as a buffer to write (DLPack would let the engine write into it)."""
    if type(array).__module__.startswith(('jax', 'jaxlib')):
        raise ValueError('%s: JAX arrays are immutable; pass out= a writable array, or use '
                         'horovod.jax' % what)


def _ps(process_set):
    ps_id = process_set.process_set_id
    if ps_id is None:
        raise ValueError('Process set provided does not exist, or has not been registered.')
    return ps_id


def allreduce(array, op=Average, out=None, name=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, stream=None):
    """out = postscale * OP(prescale * array) over the set; out=None writes into ``array``.
    Returns the array written."""
    _writable(array if out is None else out, 'allreduce')
    full, one_off = _name(_ops.ALLREDUCE, name)
    _core.allreduce_async(array, out, full, op, prescale_factor, postscale_factor,
                          _ps(process_set), one_off, stream=stream).wait()
    return array if out is None else out


def allgather(array, name=None, process_set=global_process_set, stream=None):
    """Concatenation along dim 0 in set-rank order (ranks may differ in dim 0); a DLPack array
    on ``array``'s device."""
    full, one_off = _name(_ops.ALLGATHER, name)
    work = _core.allgather_async(array, full, _ps(process_set), one_off, stream=stream)
    work.wait()
    return work.outputs()[0]


def broadcast(array, root_rank, name=None, process_set=global_process_set, stream=None):
    """In place: ``array`` takes the contents of global rank ``root_rank``'s. Returns it."""
    _writable(array, 'broadcast')
    full, one_off = _name(_ops.BROADCAST, name)
    _core.broadcast_async(array, root_rank, full, _ps(process_set), one_off,
                          stream=stream).wait()
    return array


def alltoall(array, splits=None, name=None, process_set=global_process_set, stream=None):
    """Rows of dim 0 go to the set's ranks by ``splits`` (None: equal parts). Returns
    (a DLPack array on ``array``'s device, the list of rows received from each rank)."""
    full, one_off = _name(_ops.ALLTOALL, name)
    work = _core.alltoall_async(array, None if splits is None else [int(s) for s in splits],
                                full, _ps(process_set), one_off, stream=stream)
    work.wait()
    return work.outputs()[0], list(work.received_splits())


def reducescatter(array, out, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set, stream=None):
    """Reduces over the set and writes this rank's block of dim 0 into ``out`` (rank r of n gets
    d // n + 1 rows if r < d % n, else d // n). Returns ``out``."""
    _writable(out, 'reducescatter')
    full, one_off = _name(_ops.REDUCESCATTER, name)
    _core.reducescatter_async(array, out, full, op, prescale_factor, postscale_factor,
                              _ps(process_set), one_off, stream=stream).wait()
    return out
