"""The Adasum delta optimizer: ``hvd.DistributedOptimizer(opt, op=hvd.Adasum)`` on more than one
rank.

Gradients stay local. When a parameter's gradient is final (after ``backward_passes_per_step``
backward passes), its hook runs the wrapped optimizer's update for that parameter alone, turns
the parameter into the update's delta (new - old) and starts an in-place Adasum allreduce of it.
``step()`` waits for every delta and sets each parameter to old + Adasum(deltas). Parameters whose
hook did not fire (no gradient this step) take their local step in ``step()``.

The learning rate is not scaled by the number of ranks (Adasum combines the ranks' updates
adaptively; see docs/adasum.md). As in Horovod, ``synchronize()`` does nothing and
``skip_synchronize()`` is refused.
"""

from contextlib import contextmanager

import torch

from horovod.torch._grad_hooks import register_grad_hooks
from horovod.torch.async_ops import Adasum, allreduce_async_, synchronize


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    # Copied into a dynamically created subclass of the user's optimizer class (same name), so
    # super(self.__class__, self) is that optimizer.
    _hvd_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [('allreduce.noname.%s.%s' % (i, j), v)
                                for i, param_group in enumerate(self.param_groups)
                                for j, v in enumerate(param_group['params'])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError('named_parameters should be a sequence of tuples (name, parameter), '
                             'usually produced by model.named_parameters().')
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self._handles = {}       # parameter -> (handle, compression ctx)
        self._hook_handles = []
        self._grad_accs = []
        self._requires_update = set()
        # The parameter's value before its local step (the delta's origin).
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False)
                                 for _, p in named_parameters}
        self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        register_grad_hooks(self)

    def _allreduce_delta_async(self, p):
        """Local step of ``p`` alone, ``p`` := its delta, Adasum allreduce of it in place."""
        if p.grad is None:
            # No gradient on this rank this step: the local step leaves p as it is (delta 0),
            # and the rank still takes part in the collective.
            p.grad = torch.zeros_like(p)
        start = self._starting_models[p]
        stashed = [group['params'] for group in self.param_groups]
        for group in self.param_groups:
            group['params'] = [p] if any(p is v for v in group['params']) else []
        try:
            start.data.copy_(p.data)
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group['params'] = params
        p.data.sub_(start)
        tensor_compressed, ctx = self._compression.compress(p.data)
        handle = allreduce_async_(tensor_compressed, name=self._parameter_names.get(p), op=Adasum)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than "
                        "backward_passes_per_step times before call "
                        "to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_delta_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        pass

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        # Parameters whose hook has not started their allreduce (no gradient this step, or
        # step() before backward_passes_per_step passes): their local step and allreduce now,
        # in name order so that every rank enqueues alike.
        pending = [p for p in self._requires_update
                   if p not in self._handles or self._handles[p][0] is None]
        for p in sorted(pending, key=lambda q: self._parameter_names.get(q, '')):
            self._handles[p] = self._allreduce_delta_async(p)
        for p, (handle, ctx) in self._handles.items():
            delta = self._compression.decompress(synchronize(handle), ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data.to(start.dtype))
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() "
                                 "but before optimizer.step() or optimizer.synchronize(). "
                                 "This is prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)
