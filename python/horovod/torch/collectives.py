"""Differentiable synchronous collectives for PyTorch (autograd Functions).

When autograd is not involved (grad mode off, or no input requires grad) the Function machinery
is skipped: same result, less per-call overhead.
"""

import torch

from horovod.common.process_sets import global_process_set
from horovod.torch import async_ops as _ops
from horovod.torch.compression import Compression
from horovod.torch.async_ops import (Average, Sum, allgather_async, allreduce_async,
                                   alltoall_async, broadcast_async, grouped_allgather_async,
                                   grouped_allreduce_async, grouped_reducescatter_async,
                                   handle_average_backwards_compatibility, reducescatter_async,
                                   synchronize)


def _needs_grad(tensor):
    return tensor.requires_grad and torch.is_grad_enabled()


# ---- allreduce -----------------------------------------------------------------------------------

class HorovodAllreduce(torch.autograd.Function):
    """Allreduce; the gradient is the same allreduce of the incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                 process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        return (allreduce(grad_output.contiguous(), average=ctx.average, op=ctx.op,
                          prescale_factor=ctx.prescale_factor,
                          postscale_factor=ctx.postscale_factor,
                          process_set=ctx.process_set),
                None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` over all ranks of ``process_set`` into a new tensor (input untouched).

    Result = postscale_factor * OP(prescale_factor * tensor); Average divides by the set size.
    Compression is applied before and undone after the reduction. Differentiable: the gradient
    is the allreduce of the gradient with the same op and factors.
    """
    if compression is Compression.none and not (tensor.requires_grad and torch.is_grad_enabled()):
        # The common case, without the no-op compress/decompress calls.
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                           postscale_factor, process_set))
    tensor_compressed, ctx = compression.compress(tensor)
    if _needs_grad(tensor_compressed):
        reduced = HorovodAllreduce.apply(tensor_compressed, average, name, op, prescale_factor,
                                         postscale_factor, process_set)
    else:
        reduced = synchronize(allreduce_async(tensor_compressed, average, name, op,
                                              prescale_factor, postscale_factor, process_set))
    return compression.decompress(reduced, ctx)


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set,
                *tensors):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                         postscale_factor, process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce([g.contiguous() for g in grad_output],
                                         average=ctx.average, op=ctx.op,
                                         prescale_factor=ctx.prescale_factor,
                                         postscale_factor=ctx.postscale_factor,
                                         process_set=ctx.process_set)
        return (None, None, None, None, None, None, *grad_reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Allreduce of a list of tensors, negotiated as one unit (may be fused). Returns a list of
    new tensors. Differentiable."""
    compressed = [compression.compress(t) for t in tensors]
    tensors_compressed = [t for t, _ in compressed]
    if any(_needs_grad(t) for t in tensors_compressed):
        reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor,
                                                postscale_factor, process_set,
                                                *tensors_compressed)
    else:
        reduced = synchronize(grouped_allreduce_async(tensors_compressed, average, name, op,
                                                      prescale_factor, postscale_factor,
                                                      process_set))
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(reduced, compressed)]


# ---- allgather -----------------------------------------------------------------------------------

def _rank_offset(dims, process_set):
    r = process_set.rank() if process_set.process_set_id != 0 else _ops.rank()
    return int(dims[:r].sum().item()) if r != 0 else 0


class HorovodAllgather(torch.autograd.Function):
    """Allgather; the gradient is this rank's rows of the averaged incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output.contiguous(), op=Average,
                                 process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ctx.process_set)
        offset = _rank_offset(dims, ctx.process_set)
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's ``tensor`` along dim 0, in set-rank order (first dimensions may
    differ, the others must match). Differentiable."""
    if _needs_grad(tensor):
        return HorovodAllgather.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return synchronize(grouped_allgather_async(list(tensors), name, process_set))

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce([g.contiguous() for g in grad_output], op=Average,
                                         process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dims], dtype=torch.int64),
                         process_set=ctx.process_set)  # [set size, n]
        r = (ctx.process_set.rank() if ctx.process_set.process_set_id != 0 else _ops.rank())
        offsets = dims[:r].sum(dim=0).tolist() if r != 0 else [0] * len(ctx.dims)
        grads = [g.narrow(0, int(off), d) for g, off, d in zip(grad_reduced, offsets, ctx.dims)]
        return (None, None, *grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather of each tensor of a list; returns a list. Differentiable."""
    if any(_needs_grad(t) for t in tensors):
        return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))
    return list(synchronize(grouped_allgather_async(tensors, name, process_set)))


# ---- broadcast -----------------------------------------------------------------------------------

class HorovodBroadcast(torch.autograd.Function):
    """Broadcast; the gradient is the averaged incoming gradient on the root, zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output.contiguous(), op=Average,
                                 process_set=ctx.process_set)
        if _ops.rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root's ``tensor`` on every rank (``root_rank`` is a global rank); the input is not
    modified. Differentiable."""
    if _needs_grad(tensor):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


# ---- alltoall ------------------------------------------------------------------------------------

class HorovodAlltoall(torch.autograd.Function):
    """Alltoall; the gradient is the alltoall of the incoming gradient with the received
    splits. Rows past the sum of ``splits`` were not sent: their gradient is zero."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.recvsplits = received_splits
        ctx.input_rows = tensor.shape[0] if tensor.dim() > 0 else None
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, grad_received_splits):
        grad_wrt_tensor, _ = alltoall(grad_output.contiguous(), splits=ctx.recvsplits,
                                      process_set=ctx.process_set)
        if ctx.input_rows is not None and grad_wrt_tensor.shape[0] < ctx.input_rows:
            unsent = grad_wrt_tensor.new_zeros((ctx.input_rows - grad_wrt_tensor.shape[0],) +
                                               tuple(grad_wrt_tensor.shape[1:]))
            grad_wrt_tensor = torch.cat([grad_wrt_tensor, unsent])
        return grad_wrt_tensor, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of dim 0 to the set's ranks (``splits`` rows to each; None: equal split) and
    gathers what they send. As in Horovod, ``splits`` may sum to fewer rows than ``tensor`` has:
    the rows past the sum are not sent (a sum above the row count is a ``ValueError``). Returns
    ``output`` when ``splits`` is None, else ``(output, received_splits)``. Differentiable."""
    if _needs_grad(tensor):
        output, received_splits = HorovodAlltoall.apply(tensor, splits, name, process_set)
    else:
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
    if splits is None:
        return output
    return output, received_splits


# ---- reducescatter -------------------------------------------------------------------------------

def _scale_reducescatter_grad(grad, op, process_set, prescale_factor, postscale_factor):
    factor = 1.0
    if op == Sum:
        factor *= process_set.size() if process_set.process_set_id != 0 else _ops.size()
    factor *= prescale_factor * postscale_factor
    return grad * factor if factor != 1.0 else grad


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter; the gradient is the allgather of the (scaled) incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = _scale_reducescatter_grad(grad_output.contiguous(), ctx.op, ctx.process_set,
                                         ctx.prescale_factor, ctx.postscale_factor)
        return allgather(grad, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces ``tensor`` over the set, then each rank keeps its block of dim 0. Only Sum and
    Average. Differentiable."""
    tensor_compressed, ctx = compression.compress(tensor)
    if _needs_grad(tensor_compressed):
        reduced = HorovodReducescatter.apply(tensor_compressed, name, op, process_set,
                                             prescale_factor, postscale_factor)
    else:
        reduced = synchronize(reducescatter_async(tensor_compressed, name, op, process_set,
                                                  prescale_factor, postscale_factor))
    return compression.decompress(reduced, ctx)


class HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set,
                                                       prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = [_scale_reducescatter_grad(g.contiguous(), ctx.op, ctx.process_set, ctx.prescale_factor,
                                           ctx.postscale_factor) for g in grad_output]
        return (None, None, None, None, None,
                *grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatter of each tensor of a list; returns a list. Differentiable."""
    compressed = [compression.compress(t) for t in tensors]
    tensors_compressed = [t for t, _ in compressed]
    if any(_needs_grad(t) for t in tensors_compressed):
        reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                    postscale_factor, *tensors_compressed)
    else:
        reduced = synchronize(grouped_reducescatter_async(tensors_compressed, name, op,
                                                          process_set, prescale_factor,
                                                          postscale_factor))
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(reduced, compressed)]


__all__ = ['allreduce', 'grouped_allreduce', 'allgather', 'grouped_allgather', 'broadcast',
           'alltoall', 'reducescatter', 'grouped_reducescatter', 'handle_average_backwards_compatibility']
