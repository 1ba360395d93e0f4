"""DistributedOptimizer: averages gradients across ranks while backward is still running.

Each parameter gets a post-accumulate-grad hook (torch >= 2.1; older versions hook the gradient
accumulator, as Horovod does). The first ``synchronize()`` allreduces every gradient on its own
and records the order in which the gradients became final. Then dense gradients move into
buckets (``_buckets.py``): flat buffers, one per (dtype, device) and size cap, laid out in
rank 0's recorded order, that every parameter's ``.grad`` is a view into. From then on the hooks
copy autograd's fresh gradients into the views (or autograd accumulates in place) and, once
every gradient of a bucket is final (after ``backward_passes_per_step`` passes), one in-place
allreduce of the whole bucket starts. A gradient of 4 MiB or more has a bucket of its own and
skips the hook's copy: its allreduce reads the fresh gradient and writes the view.
Sparse gradients, compression and a disabled bucket knob keep the per-gradient path.
An error-feedback compressor (``PowerSGD``, ``Int8Quantizer``) takes the whole step instead: the
hooks only count, and ``synchronize()`` hands every gradient to the compressor at once (it runs
its own grouped allreduces); its state (residuals, PowerSGD's Q) is part of ``state_dict()``.
``step()`` only waits for what is still outstanding, then runs the wrapped optimizer. The hooks
sit on the parameters, so models compiled with ``torch.compile`` work the same way.
"""

import os
import warnings
from contextlib import contextmanager

import torch

from horovod.common.basics import init_count as _init_count
from horovod.common.error_feedback import check_error_feedback_args
from horovod.common.optimizer_args import check_optimizer_args
from horovod.common.process_sets import global_process_set
from horovod.common.util import split_list
from horovod.torch import _buckets, _error_feedback
from horovod.torch._grad_hooks import register_grad_hooks
from horovod.torch.adasum_optimizer import _DistributedAdasumOptimizer
from horovod.torch.async_ops import (Adasum, Average, Max, Sum, _allreduce_into_async,
                                     allreduce_, allreduce_async_, grouped_allreduce_async_, size,
                                     sparse_allreduce_async, synchronize)
from horovod.torch.compression import Compression, ErrorFeedbackCompressor
from horovod.torch.functions import broadcast_object


class _DistributedOptimizer(torch.optim.Optimizer):
    # Methods of this class are copied into a dynamically created subclass of the user's
    # optimizer class (same class name), so super(self.__class__, self) is that optimizer.
    _hvd_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set, bucket_cap_mb=None):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._ef = compression if isinstance(compression, ErrorFeedbackCompressor) else None

        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [('allreduce.noname.%s.%s' % (i, j), v)
                                for i, param_group in enumerate(self.param_groups)
                                for j, v in enumerate(param_group['params'])]
        # make sure that named_parameters are tuples
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError('named_parameters should be a sequence of tuples (name, parameter), '
                             'usually produced by model.named_parameters().')

        dups = _DistributedOptimizer.find_duplicates([k for k, _ in named_parameters])
        if len(dups) > 0:
            raise ValueError('Parameter names in named_parameters must be unique. '
                             'Found duplicates: %s' % ', '.join(dups))

        all_param_ids = {id(v) for param_group in self.param_groups
                         for v in param_group['params']}
        named_param_ids = {id(v) for k, v in named_parameters}
        unnamed_param_ids = all_param_ids - named_param_ids
        if len(unnamed_param_ids):
            raise ValueError('named_parameters was specified, but one or more model '
                             'parameters were not named. Python object ids: '
                             '%s' % ', '.join(str(i) for i in unnamed_param_ids))

        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: self.backward_passes_per_step
                                 for _, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        # key: parameter, or tuple of parameters (a group); value: (handle, ctx)
        self._handles = {}
        self._hook_handles = []
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        if groups is not None:
            if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
                raise ValueError('groups should be a non-negative integer or '
                                 'a list of list of torch.Tensor.')
            if isinstance(groups, list):
                grouped_parameter_ids = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError('groups must consist of torch.Tensor.')
                        if id(p) in grouped_parameter_ids:
                            raise ValueError('A parameter can only appear once in groups.')
                        grouped_parameter_ids.add(id(p))
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        self._p_groups = None  # the groups as lists of parameters, in rank 0's order

        # Gradient buckets (see _buckets.py), built at the end of the first synchronize().
        # _bucket_cap: bytes per bucket, 0 = per-gradient path only.
        self._bucket_cap = (_buckets.cap_bytes(bucket_cap_mb)
                            if compression is Compression.none else 0)
        self._buckets = None     # list of _buckets.Bucket once built
        self._bucket_of = {}     # parameter -> (bucket, its view)
        self._bucket_busy = False  # a bucket hook fired since the last synchronize()
        self._ready_order = []   # until built: parameters in the order their hooks first fired
        self._ready_seen = set()
        self._sparse_seen = set()

        if self.process_set.included() and (size() > 1 or
                                            os.environ.get('HOROVOD_ELASTIC') == '1'):
            self._register_hooks()

    def state_dict(self, *args, **kwargs):
        """The wrapped optimizer's state dict, plus (with an error-feedback compressor) its
        state under ``'horovod_compression'``: {parameter name: {slot: tensor}}."""
        state = super(self.__class__, self).state_dict(*args, **kwargs)
        if self._ef is not None:
            state['horovod_compression'] = _error_feedback.export(self._ef, self._parameter_names)
        return state

    def load_state_dict(self, state_dict, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self._reset_delays()
        ef_state = None
        if 'horovod_compression' in state_dict:
            state_dict = dict(state_dict)
            ef_state = state_dict.pop('horovod_compression')
        super(self.__class__, self).load_state_dict(state_dict, *args, **kwargs)
        if ef_state is not None:
            if self._ef is None:
                raise ValueError('This optimizer state holds error-feedback compression state '
                                 '(saved with compression=PowerSGD/Int8Quantizer); this '
                                 'DistributedOptimizer has compression={!r}'
                                 .format(self._compression))
            _error_feedback.load(self._ef, ef_state, self._parameter_names)

    def _reset_delays(self):
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for bucket in self._buckets or ():
            bucket.pending = len(bucket.params)
        self._bucket_busy = False

    @staticmethod
    def find_duplicates(lst):
        seen = set()
        dups = set()
        for el in lst:
            if el in seen:
                dups.add(el)
            seen.add(el)
        return dups

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        self._reset_delays()

    def _register_hooks(self):
        if self._groups is not None:
            p_list = [p for param_group in self.param_groups
                      for p in param_group['params'] if p.requires_grad]
            # Every rank must form the same groups in the same order: the set root's order.
            p_list_names = [self._parameter_names.get(p) for p in p_list]
            p_list_names = broadcast_object(p_list_names, root_rank=self._root_rank(),
                                            process_set=self.process_set)
            order = {n: i for i, n in enumerate(p_list_names)}
            p_list = sorted(p_list, key=lambda p: order[self._parameter_names.get(p)])

            if isinstance(self._groups, list):
                p_groups = []
                grouped_id = set()
                p_list_ids = {id(p) for p in p_list}
                for group in self._groups:
                    p_groups.append([p for p in group if id(p) in p_list_ids])
                    grouped_id.update(id(p) for p in p_groups[-1])
                for p in p_list:
                    if id(p) not in grouped_id:
                        p_groups.append([p])
            else:
                p_groups = split_list(p_list, self._groups)

            p_groups = [tuple(g) for g in p_groups if len(g) > 0]
            self._p_groups = p_groups
            for group in p_groups:
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

        register_grad_hooks(self)

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Not computed on this rank (e.g. an unused branch) but maybe on others: contribute
            # zeros so that the collective matches.
            p.grad = p.data.new(p.size()).zero_()

        name = self._parameter_names.get(p)
        tensor = p.grad

        if p.grad.is_sparse:
            if self.sparse_as_dense:
                tensor = tensor.to_dense()
            else:
                return self._sparse_allreduce_grad_async(p, name)

        tensor_compressed, ctx = self._compression.compress(tensor)

        if self.op == Average:
            # Split the average across pre/postscale; the core divides by the set size.
            prescale_factor = 1.0 / self.gradient_predivide_factor
            postscale_factor = self.gradient_predivide_factor
        else:
            prescale_factor = 1.0
            postscale_factor = 1.0

        handle = allreduce_async_(tensor_compressed, name=name, op=self.op,
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor,
                                  process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, ps):
        for p in ps:
            if p.grad is None:
                p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(ps[0])
        tensors_compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in ps])
        handle = grouped_allreduce_async_(list(tensors_compressed), name=name, op=self.op,
                                          process_set=self.process_set)
        return handle, ctxs

    def _sparse_allreduce_grad_async(self, p, name):
        handle = sparse_allreduce_async(p.grad, name=name, op=self.op,
                                        process_set=self.process_set)
        return handle, None

    def _make_hook(self, p):
        def hook(*ignore):
            if self._ef is not None:
                return _error_feedback.hook(self, p)
            if self._buckets is not None and self._buckets_init != _init_count():
                self._forget_buckets()
            entry = self._bucket_of.get(p)
            if entry is not None:
                return self._bucket_hook(p, entry[0], entry[1])
            if self._buckets is None and self._bucket_cap:
                # Buckets are laid out after the first step: until then, record the order in
                # which gradients become final, and which are sparse.
                if p not in self._ready_seen:
                    self._ready_seen.add(p)
                    self._ready_order.append(p)
                if p.grad is not None and p.grad.is_sparse:
                    self._sparse_seen.add(p)
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
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        handle, ctxs = self._grouped_allreduce_grad_async(group)
                        self._handles[group] = (handle, ctxs)
                        # Remove any None entries from previous no-op hook calls
                        for gp in group:
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    # ---- buckets ------------------------------------------------------------------------------

    def _scale_factors(self):
        if self.op == Average:
            # Split the average across pre/postscale; the core divides by the set size.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    @staticmethod
    def _adopt(p, view):
        """Makes ``p.grad`` the bucket view again after something replaced it (``model.zero_grad()``
        set it to None, ``backward(create_graph=True)`` made a new tensor, ...): the view takes
        the current gradient (zeros if there is none)."""
        g = p.grad
        if g is None:
            view.zero_()
        elif g.is_sparse:
            view.zero_().add_(g)
        else:
            view.copy_(g.detach())
        p.grad = view

    def _bucket_hook(self, p, bucket, view):
        # Called by autograd (the thread running backward) once p.grad has been accumulated.
        delay = self._allreduce_delay[p]
        if delay <= 0:
            raise AssertionError(
                "Gradients were computed more than "
                "backward_passes_per_step times before call "
                "to step(). Increase backward_passes_per_step to "
                "accumulate gradients locally.")
        if p.grad is not view and not bucket.solo:
            self._adopt(p, view)  # a solo bucket reads the gradient where it is (_launch_bucket)
        self._bucket_busy = True
        self._allreduce_delay[p] = delay - 1
        if delay == 1:
            bucket.pending -= 1
            if bucket.pending == 0:
                self._launch_bucket(bucket)

    def _launch_bucket(self, bucket):
        """Starts the bucket's allreduce. A solo bucket's gradient goes from wherever autograd
        left it straight into the view (synchronize() then makes the view ``p.grad``); any other
        gradient not in its view yet is copied there first."""
        prescale, postscale = self._scale_factors()
        kwargs = dict(name=bucket.name, op=self.op, prescale_factor=prescale,
                      postscale_factor=postscale, process_set=self.process_set)
        if bucket.solo and self.op != Adasum:
            p, view = bucket.params[0], bucket.views[0]
            g = p.grad
            if g is not None and g is not view and _buckets.can_reduce_from(g, view):
                bucket.source = g  # alive until the allreduce has read it
                bucket.handle = _allreduce_into_async(g.detach(), view, **kwargs)
                return
        for p, view in zip(bucket.params, bucket.views):
            if p.grad is not view:
                self._adopt(p, view)
        # A solo bucket is reduced as its view either way: every rank names the same shape.
        bucket.handle = allreduce_async_(bucket.views[0] if bucket.solo else bucket.flat, **kwargs)

    def _root_rank(self):
        ranks = self.process_set.ranks
        return min(ranks) if ranks else 0

    def _build_buckets(self):
        """Moves dense gradients into buckets. Collective over the process set (called by every
        member's first synchronize()): gradients sparse on any rank stay out, and the layout
        follows the root's order, so that every rank builds the same buckets."""
        self._buckets = []
        self._buckets_init = _init_count()
        by_name = {self._parameter_names[p]: p for p in self._requires_update}
        names = sorted(by_name)
        if not names:
            return
        tag = 'DistributedOptimizer.buckets.' + names[0]
        flags = torch.tensor([1 if by_name[n] in self._sparse_seen else 0 for n in names],
                             dtype=torch.int32)
        allreduce_(flags, name=tag + '.sparse', op=Max, process_set=self.process_set)
        eligible = {n for n, f in zip(names, flags.tolist())
                    if f == 0 and by_name[n].dtype in _buckets.kDtypes}

        if self._p_groups is not None:
            # Explicit groups (already in rank 0's order): each group is a bucket per dtype.
            segments = [[self._parameter_names[p] for p in g] for g in self._p_groups]
            cap = None
        else:
            # Gradients become final in backward order; those not seen yet go last, in reverse
            # registration order.
            order = [self._parameter_names[p] for p in self._ready_order]
            seen = set(order)
            registered = [self._parameter_names[p] for group in self.param_groups
                          for p in group['params'] if p in self._requires_update]
            order += [n for n in reversed(registered) if n not in seen]
            segments = [broadcast_object(order, root_rank=self._root_rank(), name=tag + '.order',
                                         process_set=self.process_set)]
            cap = self._bucket_cap
        segments = [[by_name[n] for n in seg if n in eligible] for seg in segments]

        for i, params in enumerate(_buckets.plan(segments, cap)):
            bucket = _buckets.Bucket('bucket.%d.%s.%s' % (i, self._parameter_names[params[0]],
                                                         str(params[0].dtype)[6:]), params)
            for p, view in zip(bucket.params, bucket.views):
                self._adopt(p, view)
                self._bucket_of[p] = (bucket, view)
            self._buckets.append(bucket)
        # The per-gradient path keeps the rest, each on its own (explicit groups end here).
        self._requires_update -= set(self._bucket_of)
        self._groups = None
        self._p_to_group = {}
        self._group_counts = {}
        self._ready_order = []
        self._ready_seen = set()

    def _forget_buckets(self):
        """Horovod was re-initialized (an elastic reset) since the buckets were laid out: ranks
        new to the job have none, so every rank goes back to the per-gradient path for a step and
        lays the buckets out again together. Gradients stay in the old views until replaced."""
        self._requires_update |= set(self._bucket_of)
        self._bucket_of = {}
        self._buckets = None
        self._bucket_busy = False
        self._handles = {}
        for p in self._requires_update:
            self._allreduce_delay[p] = self.backward_passes_per_step
        if self._p_groups is not None and self._groups is None:
            self._groups = list(self._p_groups)
            self._p_to_group = {p: g for g in self._p_groups for p in g}
            self._group_counts = {g: 0 for g in self._p_groups}

    # ---- synchronize / step / zero_grad ---------------------------------------------------------

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those not started yet, e.g. for
        parameters without a gradient on this rank) and writes the results into ``p.grad``."""
        if not self.process_set.included():
            self._synchronized = True
            return
        if self._ef is not None:
            return _error_feedback.reduce_step(self)

        # Buckets whose gradients were not all final here (unused parameters, fewer backward
        # passes) start now, with what they hold: ranks match operations by name.
        for bucket in self._buckets or ():
            if bucket.handle is None:
                self._launch_bucket(bucket)

        completed = set()
        for x in self._handles.keys():
            if isinstance(x, tuple):
                completed.update(x)
            else:
                completed.add(x)
        missing_p = self._requires_update - completed

        if self._groups is not None:
            # A group whose hooks did not all fire here may have fired completely elsewhere:
            # launch it as a group (missing gradients are zeros) so that names match.
            started = set()
            for p in sorted(missing_p, key=lambda q: self._parameter_names.get(q)):
                group = self._p_to_group.get(p)
                if group is None or group in started:
                    continue
                started.add(group)
                for gp in group:
                    self._handles.pop(gp, None)
                self._handles[group] = self._grouped_allreduce_grad_async(group)
                self._group_counts[group] = 0
            missing_p = {p for p in missing_p if p not in self._p_to_group}

        for p in sorted(missing_p, key=lambda q: self._parameter_names.get(q)):
            self._handles[p] = self._allreduce_grad_async(p)

        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)

        for p, (handle, ctx) in self._handles.items():
            if isinstance(p, tuple):
                # A grouped result: unpack.
                outputs = synchronize(handle)
                for gp, output, gctx in zip(p, outputs, ctx):
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                    gp.grad.set_(self._compression.decompress(output, gctx))
                if self._groups is not None and self._group_counts[p] != 0:
                    self._group_counts[p] = 0
            else:
                # A callable handle (sparse allreduce) returns the aggregated tensor.
                output = synchronize(handle) if not callable(handle) else handle()
                self._allreduce_delay[p] = self.backward_passes_per_step
                if self._groups is not None:
                    group = self._p_to_group.get(p)
                    if group is not None and self._group_counts[group] != 0:
                        self._group_counts[group] = 0
                if p.grad.is_sparse:
                    aggregated = self._compression.decompress(output, ctx)
                    if not aggregated.is_sparse:
                        # sparse_as_dense: back to sparse before the update
                        aggregated = aggregated.to_sparse()
                    # Sparse grads do not support set_; this is the equivalent.
                    p.grad.zero_().add_(aggregated)
                else:
                    p.grad.set_(self._compression.decompress(output, ctx))
        self._handles.clear()

        for bucket in self._buckets or ():
            handle, bucket.handle = bucket.handle, None
            source, bucket.source = bucket.source, None
            synchronize(handle)  # the views hold the result
            if source is not None:
                bucket.params[0].grad = bucket.views[0]
        if self._buckets:
            self._reset_delays()
        elif self._buckets is None and self._bucket_cap:
            self._build_buckets()

        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """A context manager used to specify that optimizer.step() should not perform
        synchronization (because optimizer.synchronize() was called explicitly, e.g. to clip
        gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none=True):
        """As the wrapped optimizer's. Gradients living in buckets: ``set_to_none`` (the
        default) sets them to None, and the next backward's hooks copy the fresh gradients into
        their views (a solo bucket's is reduced from where it is); otherwise the views are
        zeroed in place and stay ``p.grad``."""
        if self._handles or self._bucket_busy:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() "
                                 "but before optimizer.step() or optimizer.synchronize(). "
                                 "This is prohibited as it can cause a race condition.")
        if not self._buckets:
            return super(self.__class__, self).zero_grad(set_to_none)
        if set_to_none:
            # The next backward then hands each hook a fresh gradient, which it copies into
            # its view: one pass over the gradients, where zeroing the buckets here and letting
            # autograd add into them would take two (and read the zeros back).
            for bucket in self._buckets:
                for p in bucket.params:
                    p.grad = None
        else:
            for bucket in self._buckets:
                bucket.flat.zero_()
                for p, view in zip(bucket.params, bucket.views):
                    if p.grad is not view:
                        p.grad = view
        bucketed = self._bucket_of
        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None or p in bucketed:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()


def DistributedOptimizer(optimizer, named_parameters=None,
                         compression=Compression.none,
                         backward_passes_per_step=1,
                         op=Average,
                         gradient_predivide_factor=1.0,
                         num_groups=0, groups=None,
                         sparse_as_dense=False,
                         process_set=global_process_set,
                         bucket_cap_mb=None):
    """Wraps a torch optimizer so that gradients are averaged across ranks (allreduce) before
    the update. Returns an instance of a subclass of ``optimizer``'s class with the same name,
    built over ``optimizer.param_groups``.

    Args:
        optimizer: Optimizer to use for computing gradients and applying updates.
        named_parameters: Mapping of (name, parameter), usually ``model.named_parameters()``;
            names are the allreduce names. Default: generated names.
        compression: Compression.none (default), Compression.fp16 or Compression.bf16, or an
            error-feedback compressor instance: PowerSGD(rank=...) or Int8Quantizer()
            (op Average or Sum, no groups, gradient_predivide_factor 1; see
            docs/compression.md). Use one compressor instance per optimizer.
        backward_passes_per_step: Backward passes accumulated locally before the allreduce.
        op: Average (default), Sum or Adasum (on more than one rank: the delta optimizer of
            adasum_optimizer.py, which reduces weight deltas instead of gradients).
        gradient_predivide_factor: Divide gradients by this before the sum, multiply after.
        num_groups: Deprecated; use groups.
        groups: An int (split parameters into that many groups) or a list of lists of
            parameters; each group is allreduced as one grouped operation.
        sparse_as_dense: Densify sparse gradients before the allreduce.
        process_set: Process set whose ranks average gradients (default: all).
        bucket_cap_mb: Size cap of a gradient bucket in MiB (default: HOROVOD_BUCKET_CAP_MB,
            else 25); 0 keeps every gradient on its own. Buckets are off with compression and
            with HOROVOD_DISABLE_GRADIENT_BUCKETS=1.
    """
    # We dynamically create a new class that inherits from the optimizer that was passed in.
    # The goal is to override the `step()` method with an allreduce implementation.
    groups = check_optimizer_args(op, gradient_predivide_factor, num_groups, groups,
                                  backward_passes_per_step)
    check_error_feedback_args(compression, op, gradient_predivide_factor, groups, Average, Sum)

    if op == Adasum and size() > 1:
        if process_set.process_set_id != 0:
            raise NotImplementedError("Adasum does not support non-global process sets yet.")
        # The delta optimizer (adasum_optimizer.py): local steps, Adasum of the weight deltas.
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
                   dict(_DistributedAdasumOptimizer.__dict__))
        return cls(optimizer.param_groups, named_parameters, compression,
                   backward_passes_per_step)

    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups, sparse_as_dense, process_set,
               bucket_cap_mb)
