"""The torch DistributedOptimizer's side of the error-feedback compressors (``PowerSGD``,
``Int8Quantizer``, horovod.common.error_feedback): the gradient hook, the step's reduction, and
their state in the optimizer's state dict, keyed by parameter name (the slot keys are the
parameters themselves) so that it survives ``torch.save`` and a new model object with the same
names."""

from horovod.common.error_feedback import Comm
from horovod.torch import async_ops as _async

_STEP = '__step__'
_OPS = {'average': _async.Average, 'sum': _async.Sum, 'max': _async.Max}


def hook(opt, p):
    """``p``'s gradient is final: counts the pass; the reduction waits for ``reduce_step``."""
    if opt._allreduce_delay[p] <= 0:
        raise AssertionError("Gradients were computed more than backward_passes_per_step "
                             "times before call to step(). Increase "
                             "backward_passes_per_step to accumulate gradients locally.")
    opt._allreduce_delay[p] -= 1
    opt._handles[p] = (None, None)  # ready; reduced by synchronize()


def reduce_step(opt):
    """Every gradient of ``opt`` (zeros where this rank has none, in name order, the same on
    every rank) through the compressor; the results replace the gradients in place."""
    params = sorted(opt._requires_update, key=lambda q: opt._parameter_names.get(q))
    grads = []
    for p in params:
        if p.grad is None:
            p.grad = p.data.new(p.size()).zero_()
        g = p.grad
        if g.is_sparse:
            if not opt.sparse_as_dense:
                raise ValueError('{!r} needs dense gradients: parameter {} has a sparse one; '
                                 'pass sparse_as_dense=True'.format(
                                     opt._ef, opt._parameter_names.get(p)))
            g = g.to_dense()
        grads.append(g.detach())
    if params:
        ps = opt.process_set
        prefix = 'DistributedOptimizer.' + type(opt._ef).__name__

        def allreduce(tensors, op, tag):
            return _async.synchronize(_async.grouped_allreduce_async(
                tensors, name='%s.%s' % (prefix, tag), op=_OPS[op], process_set=ps))
        n = ps.size()
        out = opt._ef.reduce(grads, params, Comm(allreduce, n))
        for p, o in zip(params, out):
            if opt.op == _async.Sum:
                o = o * n
            if p.grad.is_sparse:
                p.grad.zero_().add_(o.to_sparse())
            else:
                p.grad.set_(o)  # a new tensor of the gradient's shape and dtype
    opt._handles.clear()
    opt._reset_delays()
    opt._synchronized = True


def export(compressor, names):
    """{parameter name (or '__step__'): {slot name: tensor}} of ``compressor``'s state; the
    tensors are the live slots (as torch's own state_dict hands out its buffers)."""
    out = {}
    for key, slot_name, slot in compressor.state_items():
        name = key if isinstance(key, str) else names[key]
        out.setdefault(name, {})[slot_name] = slot
    return out


def load(compressor, state, names):
    """Copies ``state`` (from ``export``) into ``compressor``, creating slots it lacks;
    ``names`` maps parameters to names. Unknown parameter names raise ValueError."""
    by_name = {n: p for p, n in names.items()}
    by_name[_STEP] = _STEP
    unknown = sorted(set(state) - set(by_name))
    if unknown:
        raise ValueError('Compression state names parameters this optimizer does not have: '
                         '{}'.format(', '.join(unknown)))
    current = {(id(k), n): s for k, n, s in compressor.state_items()}
    for name in sorted(state, key=lambda n: (n != _STEP, n)):
        key = by_name[name]
        for slot_name, value in state[name].items():
            slot = current.get((id(key), slot_name))
            if slot is not None and slot.shape == value.shape:
                slot.copy_(value)
            else:
                compressor.adopt_slot(key, slot_name, value.detach().clone())
