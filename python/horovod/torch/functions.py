"""Model/optimizer state broadcasting and object collectives for PyTorch."""

import collections

import torch

from horovod.common import objects as _objects
from horovod.common.process_sets import global_process_set
from horovod.torch.async_ops import broadcast_, broadcast_async_, rank, synchronize
from horovod.torch.collectives import allgather


def broadcast_parameters(params, root_rank):
    """Broadcasts parameters from ``root_rank`` to all other ranks, in place.

    ``params``: a dict (e.g. ``model.state_dict()``; sorted by key, keys name the operations) or a
    list of tensors or of ``(name, tensor)`` tuples (e.g. ``list(model.named_parameters())``).
    """
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        # support both named_parameters() and regular parameters()
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError('invalid params of type: %s' % type(params))

    # Run the broadcasts asynchronously, then wait for all of them.
    handles = [broadcast_async_(p, root_rank, name) for name, p in params]
    for handle in handles:
        synchronize(handle)


def _get_types(x):
    """The full (possibly nested) type structure of x, for casting back after a round trip."""
    if isinstance(x, (list, tuple)):
        return type(x), [_get_types(xi) for xi in x]
    return type(x)


def _recursive_cast(x, dtype):
    if isinstance(dtype, tuple):
        t, dtypes = dtype
        return t(_recursive_cast(x[i], dtypes[i]) for i in range(len(x)))
    return x if isinstance(x, dtype) else dtype(x)


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Broadcasts an optimizer's state (tensors in place, plus scalar state and param-group
    options such as the learning rate) from ``root_rank``. Works with a plain torch optimizer or
    a DistributedOptimizer. An optimizer without state is first initialized locally (zero grads
    and one local step of the wrapped optimizer)."""
    from horovod.torch.optimizer import _DistributedOptimizer

    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError('cannot broadcast torch.optim.LBFGS state')

    _broadcast_compression_state(optimizer, root_rank)
    state_dict = optimizer.state_dict()

    # Newly created optimizers have no state; initialize it with zero gradients.
    if len(state_dict['state']) == 0:
        sparse_params = set()
        if model is not None:
            for module in model.modules():
                if isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and \
                        module.sparse:
                    sparse_params.update(id(p) for p in module.parameters())
        for group in optimizer.param_groups:
            for p in group['params']:
                if p.requires_grad and id(p) not in state_dict['state']:
                    p.grad = p.data.new(p.size()).zero_()
                    if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse_params:
                        p.grad = p.grad.to_sparse()
        # A DistributedOptimizer's step() would allreduce every gradient, which deadlocks unless
        # every rank calls it: take the wrapped optimizer's step directly.
        if isinstance(optimizer, _DistributedOptimizer) or \
                getattr(optimizer, '_hvd_distributed', False):
            super(optimizer.__class__, optimizer).step()
        else:
            optimizer.step()
        state_dict = optimizer.state_dict()

    # Still empty: the optimizer is stateless, nothing to broadcast.
    if len(state_dict['state']) == 0:
        return

    tensors = []
    scalars = {}
    callbacks = {}
    occurrences = collections.defaultdict(int)

    def _option_callback(index, option_key, types):
        def apply(value):
            optimizer.param_groups[index][option_key] = _recursive_cast(value, types)
        return apply

    def _state_callback(pid, name, types):
        def apply(value):
            state_dict['state'][pid][name] = _recursive_cast(value, types)
        return apply

    # Param groups are an ordered list; normally one per model.
    for index, group in enumerate(state_dict['param_groups']):
        for option_key, option_value in group.items():
            if option_key == 'params':
                continue
            key = '%s.%d' % (option_key, index)
            scalars[key] = option_value
            callbacks[key] = _option_callback(index, option_key, _get_types(option_value))

        for pid in group['params']:
            if pid not in state_dict['state']:
                continue  # the param does not require grad
            param_state = state_dict['state'][pid]
            for name, p in param_state.items():
                # A state name appears once per parameter; number the occurrences.
                occurrences[name] += 1
                key = '%s.%d' % (str(name), occurrences[name])
                if torch.is_tensor(p):
                    tensors.append((key, p))
                else:
                    scalars[key] = p
                    callbacks[key] = _state_callback(pid, name, _get_types(p))

    broadcast_parameters(tensors, root_rank)

    scalars = broadcast_object(scalars, root_rank)
    for key, value in scalars.items():
        if key in callbacks:
            callbacks[key](value)


def _broadcast_compression_state(optimizer, root_rank):
    """An error-feedback compressor's state that every rank must agree on (PowerSGD's Q and the
    step count) takes ``root_rank``'s values; the residuals stay each rank's own (the error of
    what that rank sent). As an object, so a rank that has no state yet (a new elastic worker)
    gets it too."""
    compressor = getattr(optimizer, '_ef', None)
    if compressor is None:
        return
    from horovod.torch import _error_feedback
    local = compressor.local_slot_names()
    shared = {name: {s: t for s, t in slots.items() if s not in local}
              for name, slots in _error_feedback.export(compressor, optimizer._parameter_names).items()}
    shared = broadcast_object(shared, root_rank, name='horovod_compression_state')
    _error_feedback.load(compressor, shared, optimizer._parameter_names)


def _np_broadcast_(process_set):
    def fn(array, root_rank, name):
        t = torch.from_numpy(array)
        broadcast_(t, root_rank, name, process_set)
        return array
    return fn


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Serializes ``obj`` with cloudpickle on ``root_rank`` and returns it on every rank of the
    process set (root gets its own object back)."""
    name = _objects.default_name(obj, name)
    return _objects.broadcast_object(obj, root_rank, name, rank(), _np_broadcast_(process_set))


def allgather_object(obj, name=None):
    """Returns a list with every rank's ``obj`` (cloudpickle), in rank order."""
    name = _objects.default_name(obj, name)

    def gather(array, op_name):
        return allgather(torch.from_numpy(array), name=op_name).numpy()

    return _objects.allgather_object(obj, name, gather)


__all__ = ['broadcast_parameters', 'broadcast_optimizer_state', 'broadcast_object',
           'allgather_object']
