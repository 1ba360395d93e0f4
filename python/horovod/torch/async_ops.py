"""PyTorch collectives on the Horovod core: asynchronous and in-place forms, handles, join and
barrier. The differentiable synchronous forms build on these in ``horovod.torch.collectives``;
``horovod.torch.mpi_ops`` offers both.

Tensors cross into the core as DLPack views (no copy). Outputs whose shape is known up front
(allreduce, broadcast, reducescatter) are allocated by torch on the input's device;
allgather/alltoall outputs are allocated by the core on the input's device and wrapped with
``torch.from_dlpack`` (no copy either).

CUDA tensors: the core orders each collective after torch's current stream of the tensor's device
at the time of the call (``_device_stream``, which the core calls only for device tensors, so CPU
tensors cost nothing extra) and completes the handle once the device has finished it; results are
then usable on any stream.

Naming (the matching key across ranks) follows ``horovod.common.ops.op_name``:
``<prefix><name>`` or ``<prefix>noname.<handle>``, where ``handle`` counts every asynchronous call
of this adapter (reset by init and shutdown).

Handles live in this adapter's own handle space in the core (``_core.HandleSpace``):
``synchronize`` and ``poll`` are the space's methods themselves, and the allreduce path is one
core call per tensor (``HandleSpace.allreduce``: view, name, enqueue, register). Input checks that
cost a Python-level attribute lookup per call (dtype, device, process set) run only when that
call failed, to raise the same error as before.
"""

import torch

from horovod.common import basics as _basics_mod
from horovod.common.basics import *  # noqa: F401,F403 (the basics, re-exported)
from horovod.common.basics import is_homogeneous, local_size, size
from horovod.common import ops as _ops
from horovod.common.exceptions import HorovodInternalError
from horovod.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from horovod.common.process_sets import (ProcessSet, global_process_set,  # noqa: F401
                                         add_process_set, remove_process_set)
from horovod.common.util import (check_installed_version,  # noqa: F401
                                 get_average_backwards_compatibility_fun, gpu_available,
                                 num_rank_is_power_2)
from horovod.torch.compression import Compression  # noqa: F401

_core = _basics_mod._core

# Horovod's import-time version check; the core is not compiled against torch, so it accepts
# every version.
check_installed_version('pytorch', torch.__version__)

try:
    from torch.utils.dlpack import to_dlpack as _to_dlpack
except ImportError:  # pragma: no cover - future torch without the legacy exporter
    def _to_dlpack(tensor):
        return tensor.detach() if tensor.requires_grad else tensor

# ---- handle space --------------------------------------------------------------------------------

# Kinds decide what synchronize() returns: the payload itself for _PAYLOAD (an output tensor or a
# tuple of them), _finish(work, kind, payload) for the others (see there).
_PAYLOAD = 0
_GATHER = 2     # payload: None (engine-allocated output)
_GATHER_N = 3   # payload: None (grouped, engine-allocated outputs)
_ALLTOALL = 4   # payload: device for received_splits (None = CPU)
_JOIN = 5
_BARRIER = 6


def _device_stream(ordinal):
    """The producer stream of a CUDA tensor on device ``ordinal``: torch's current stream there
    (as an int, the cudaStream_t). Called by the core for device tensors only."""
    return torch.cuda.current_stream(ordinal).cuda_stream


def _finish(work, kind, payload):
    """synchronize()'s result for the kinds whose output the engine allocated (called by the
    core after the wait)."""
    if kind == _GATHER:
        return torch.from_dlpack(work.outputs()[0])
    if kind == _GATHER_N:
        return tuple(torch.from_dlpack(o) for o in work.outputs())
    if kind == _ALLTOALL:
        output = torch.from_dlpack(work.outputs()[0])
        received = torch.tensor(work.received_splits(), dtype=torch.int32)
        if payload is not None:
            received = received.to(payload)
        return output, received
    if kind == _JOIN:
        return work.join_result()
    return None


_handles = _core.HandleSpace(_finish, _ops.ALLREDUCE, _ops.UNNAMED, _device_stream)
_next_handle = _handles.next_handle
_track = _handles.track
_allreduce_h = _handles.allreduce
_op_name = _ops.op_name


# Handles count from zero again after every init and shutdown, so that the generated names of
# unnamed calls match across ranks after an elastic reset.
_basics_mod.on_init_and_shutdown(_handles.reset)


class _ReduceOps:
    Average = Average
    Sum = Sum


handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_ReduceOps)

# ---- tensor checks -------------------------------------------------------------------------------

_SUPPORTED_DTYPES = frozenset(
    d for d in (torch.uint8, torch.int8, getattr(torch, 'uint16', None), torch.int16,
                torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
                torch.float64, torch.bool) if d is not None)


def _unsupported(tensor):
    if tensor.dtype not in _SUPPORTED_DTYPES:
        return ValueError('Tensor type %s is not supported.' % tensor.type())
    return ValueError('Tensor type %s is not supported: the tensor is on %s; Horovod runs '
                      'collectives on CPU and CUDA tensors.' % (tensor.type(), tensor.device))


def _view(tensor):
    """The tensor as the core sees it: a DLPack capsule over the same memory (no copy; results of
    in-place operations land in ``tensor``). torch's C-level exporter is used because it costs
    a fraction of ``Tensor.__dlpack__``. CUDA tensors pass too (the core decides whether this
    build serves them: a ValueError naming the device if not)."""
    if tensor.dtype not in _SUPPORTED_DTYPES or not tensor.is_cpu:
        if tensor.dtype not in _SUPPORTED_DTYPES or not tensor.is_cuda:
            raise _unsupported(tensor)
    return _to_dlpack(tensor)


def _views(tensors):
    return [_view(t) for t in tensors]


def _ps_id(process_set):
    ps_id = process_set.process_set_id
    if ps_id is None:
        raise ValueError('Process set provided does not exist, or has not been registered.')
    return ps_id


def _check_same_device(tensors):
    if tensors:
        device = tensors[0].device
        for t in tensors:
            if t.device != device:
                raise HorovodInternalError('Tensors in list must be on same device.')


def _adasum_checks(op, process_set, tensor=None):
    """Horovod's Adasum refusals before anything is sent (horovod.common.ops.check_adasum); a
    CUDA ``tensor`` runs the GPU Adasum, whose conditions are on hosts."""
    if op == Adasum:
        _ops.check_adasum(op, process_set.process_set_id, size,
                          gpu=tensor is not None and tensor.is_cuda, local_size=local_size,
                          homogeneous=is_homogeneous)


# ---- allreduce -----------------------------------------------------------------------------------

def _enqueue_failed(tensors, process_set):
    """After a fast-path enqueue raised: raises the error the up-front checks of the other
    collectives raise first (unsupported tensor, unknown process set), if any applies. The
    caller re-raises the original error otherwise."""
    for t in tensors:
        _view(t)
    _ps_id(process_set)


# The per-tensor hot path of training loops: no Python-level checks or objects beyond what the
# core call needs (see the module docstring).
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous allreduce into a new tensor; returns a handle for poll()/synchronize().

    Result = postscale_factor * OP_ranks(prescale_factor * tensor); Average divides by the
    process-set size. ``average`` is deprecated (use ``op``)."""
    if op is None or average is not None:
        op = handle_average_backwards_compatibility(op, average)
    elif op == Adasum:
        _adasum_checks(op, process_set, tensor)
    # preserve_format (the default, cheaper to call) differs from contiguous_format only for
    # inputs that are not contiguous, which the core refuses anyway.
    return _allreduce_into_async(tensor, torch.empty_like(tensor), name, op, prescale_factor,
                                 postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous in-place allreduce; synchronize() returns ``tensor`` itself."""
    if op is None or average is not None:
        op = handle_average_backwards_compatibility(op, average)
    elif op == Adasum:
        _adasum_checks(op, process_set, tensor)
    try:
        return _allreduce_h(_to_dlpack(tensor), None, tensor, name, op, prescale_factor,
                            postscale_factor, process_set.process_set_id)
    except Exception:
        _enqueue_failed((tensor,), process_set)
        raise


def _allreduce_into_async(tensor, output, name, op, prescale_factor, postscale_factor,
                          process_set):
    """Asynchronous allreduce of ``tensor`` into ``output`` (same shape and dtype); synchronize()
    returns ``output``. ``op`` as checked by the public callers. An output in a shared buffer
    (DistributedOptimizer's solo buckets) takes the core's shared in-place path."""
    try:
        return _allreduce_h(_to_dlpack(tensor), _to_dlpack(output), output, name, op,
                            prescale_factor, postscale_factor, process_set.process_set_id)
    except Exception:
        _enqueue_failed((tensor, output), process_set)
        raise


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns ``tensor``. Not differentiable."""
    # allreduce_async_'s body, then synchronize, in this one frame: the synchronous small
    # allreduce is latency-bound, and a Python call costs about a tenth of it at 4 KiB.
    if op is None or average is not None:
        op = handle_average_backwards_compatibility(op, average)
    elif op == Adasum:
        _adasum_checks(op, process_set, tensor)
    try:
        handle = _allreduce_h(_to_dlpack(tensor), None, tensor, name, op, prescale_factor,
                              postscale_factor, process_set.process_set_id)
    except Exception:
        _enqueue_failed((tensor,), process_set)
        raise
    return synchronize(handle)


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             process_set):
    if op == Adasum:
        _adasum_checks(op, process_set, tensors[0] if tensors else None)
    handle = _next_handle()
    full = _op_name(_ops.GROUPED_ALLREDUCE, name, handle)
    try:
        work = _core.grouped_allreduce_async(
            [_to_dlpack(t) for t in tensors],
            None if outputs is tensors else [_to_dlpack(t) for t in outputs], full, op,
            prescale_factor, postscale_factor, process_set.process_set_id, not name,
            _device_stream)
    except Exception:
        _check_same_device(tensors)
        _enqueue_failed(tensors if outputs is tensors else list(tensors) + list(outputs),
                        process_set)
        raise
    _track(handle, work, tuple(outputs))
    return handle


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous allreduce of a list of tensors, negotiated as one unit; synchronize()
    returns a tuple of new tensors."""
    op = handle_average_backwards_compatibility(op, average)
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place form of grouped_allreduce_async."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped allreduce; returns the tuple of (modified) input tensors."""
    handle = grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                      postscale_factor, process_set)
    return synchronize(handle)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Allreduce of a sparse COO tensor through two allgathers (indices, values). Returns a
    callable that waits and returns the sparse result (uncoalesced; Average divides the values
    by the set size)."""
    t = tensor
    # Allgather concatenates along dim 0, so gather the transposed indices ([nnz, ndim]).
    indices_handle = allgather_async(t._indices().transpose(0, 1).contiguous(),
                                     name='%s.indices' % name, process_set=process_set)
    values_handle = allgather_async(t._values().contiguous(), name='%s.values' % name,
                                    process_set=process_set)

    def handle():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        if op == Average:
            values = values / process_set.size()
        if indices.dim() == 0 or values.dim() == 0:
            return torch.sparse_coo_tensor(size=t.size(), dtype=t.dtype, device=t.device,
                                           check_invariants=False)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size(),
                                       check_invariants=False)

    return handle


# ---- allgather -----------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronous allgather (concatenation along dim 0 in set-rank order); returns a handle."""
    handle = _next_handle()
    full = _op_name(_ops.ALLGATHER, name, handle)
    work = _core.allgather_async(_view(tensor), full, _ps_id(process_set), not name,
                                 _device_stream)
    _track(handle, work, None, _GATHER)
    return handle


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Asynchronous allgather of each tensor of a list; synchronize() returns a tuple."""
    _check_same_device(tensors)
    handle = _next_handle()
    full = _op_name(_ops.GROUPED_ALLGATHER, name, handle)
    work = _core.grouped_allgather_async(_views(tensors), full, _ps_id(process_set),
                                         not name, _device_stream)
    _track(handle, work, None, _GATHER_N)
    return handle


# ---- broadcast -----------------------------------------------------------------------------------

def _broadcast_async(tensor, output, root_rank, name, process_set):
    handle = _next_handle()
    full = _op_name(_ops.BROADCAST, name, handle)
    work = _core.broadcast_async(_view(output), root_rank, full, _ps_id(process_set),
                                 not name, _device_stream)
    _track(handle, work, output)
    return handle


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronous broadcast from global rank ``root_rank`` into a new tensor."""
    if _core.rank() == root_rank:
        output = tensor.detach().clone(memory_format=torch.contiguous_format)
    else:
        output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _broadcast_async(tensor, output, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronous in-place broadcast; synchronize() returns ``tensor``."""
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor`` (modified on non-root ranks)."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall ------------------------------------------------------------------------------------

def _splits_list(splits):
    if splits is None:
        return None, None
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError('alltoall expects splits to contain 32-bit integer elements.')
        if splits.dim() != 1:
            raise ValueError('alltoall expects a 1D splits tensor')
        device = splits.device if not splits.is_cpu else None
        return [int(s) for s in splits.cpu().tolist()], device
    values = list(splits)
    for s in values:
        if isinstance(s, float) or not hasattr(s, '__index__'):
            raise ValueError('alltoall expects splits to contain 32-bit integer elements.')
    return [int(s) for s in values], None


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronous alltoall: rows of dim 0 go to the set's ranks by ``splits`` (None: equal
    split). synchronize() returns ``(output, received_splits)``."""
    split_values, device = _splits_list(splits)
    handle = _next_handle()
    full = _op_name(_ops.ALLTOALL, name, handle)
    work = _core.alltoall_async(_view(tensor), split_values, full, _ps_id(process_set),
                                not name, _device_stream)
    _track(handle, work, device, _ALLTOALL)
    return handle


# ---- reducescatter -------------------------------------------------------------------------------

def _reducescatter_shape(tensor, process_set):
    if tensor.dim() == 0:
        raise ValueError('Reducescatter does not support scalar inputs')
    if process_set.process_set_id == 0:
        n, r = _core.size(), _core.rank()
    else:
        n, r = process_set.size(), process_set.rank()
    d = tensor.shape[0]
    rows = d // n + (1 if r < d % n else 0)
    return (rows,) + tuple(tensor.shape[1:])


def _check_reducescatter_op(op):
    if op not in (Average, Sum):
        raise HorovodInternalError('Reducescatter currently only supports AVERAGE and SUM.')


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronous reducescatter: reduce, then this rank keeps its block of dim 0 (rank r of
    n gets d//n + 1 rows if r < d % n, else d//n)."""
    _check_reducescatter_op(op)
    output = tensor.new_empty(_reducescatter_shape(tensor, process_set))
    handle = _next_handle()
    full = _op_name(_ops.REDUCESCATTER, name, handle)
    work = _core.reducescatter_async(_view(tensor), _view(output), full, op, prescale_factor,
                                     postscale_factor, _ps_id(process_set), not name,
                                     _device_stream)
    _track(handle, work, output)
    return handle


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Asynchronous reducescatter of each tensor of a list; synchronize() returns a tuple."""
    _check_reducescatter_op(op)
    _check_same_device(tensors)
    outputs = [t.new_empty(_reducescatter_shape(t, process_set)) for t in tensors]
    handle = _next_handle()
    full = _op_name(_ops.GROUPED_REDUCESCATTER, name, handle)
    work = _core.grouped_reducescatter_async(_views(tensors), _views(outputs), full, op,
                                             prescale_factor, postscale_factor,
                                             _ps_id(process_set), not name,
                                             _device_stream)
    _track(handle, work, tuple(outputs))
    return handle


# ---- join / barrier / poll / synchronize ---------------------------------------------------------

def join(device=-1):
    """Declares this rank out of data and blocks until every rank joined; meanwhile this rank
    contributes zeros to the other ranks' allreduces. Returns the rank that joined last (the
    same on every rank). ``device`` is ignored (CPU build)."""
    handle = _next_handle()
    work = _core.join_async()
    _track(handle, work, None, _JOIN)
    return synchronize(handle)


def barrier(process_set=global_process_set):
    """Blocks until every member of ``process_set`` has reached the barrier."""
    handle = _next_handle()
    work = _core.barrier_async(_ps_id(process_set))
    _track(handle, work, None, _BARRIER)
    synchronize(handle)



# poll(handle): True if the asynchronous operation behind ``handle`` has completed (synchronize()
# will not block); ValueError for an unknown handle.
poll = _handles.poll

# synchronize(handle): waits for an asynchronous operation (releasing the GIL only while it
# runs) and returns its output: a tensor, a tuple of tensors (grouped), ``(output,
# received_splits)`` (alltoall), the last joined rank (join). Unknown handles return None.
# Failures raise HorovodInternalError.
synchronize = _handles.synchronize
