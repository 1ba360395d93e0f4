"""``HorovodStrategy``: Lightning 2.x training on Horovod's collectives, one process per rank
(Lightning 2 dropped the Horovod strategy it had in 1.x).

Rank, local rank and world size come from ``horovod.torch`` (``hvd.init()`` must have run, as
it has in a process started by horovod.spark.run or horovodrun). In ``setup`` the strategy
broadcasts rank 0's parameters and optimizer state and wraps every optimizer that the
LightningModule's ``configure_optimizers`` returned in ``hvd.DistributedOptimizer`` (with
``gradient_compression`` and ``backward_passes_per_step``); gradients are averaged right after
each backward pass that completes an optimizer step (Lightning runs the backward pass inside
``optimizer.step(closure)``, so the optimizers are kept in ``skip_synchronize`` and synchronize
in ``post_backward``). ``reduce``, ``all_gather``, ``broadcast``, ``barrier`` and
``reduce_boolean_decision`` (what ``self.log(..., sync_dist=True)``, EarlyStopping and
ModelCheckpoint use) are Horovod allreduce, allgather, broadcast_object and barrier.

Training runs on the CPU in this build."""

import contextlib

import torch
from pytorch_lightning.strategies import ParallelStrategy

import horovod.torch as hvd
from horovod.torch.optimizer import _DistributedOptimizer

__all__ = ['HorovodStrategy']


class HorovodStrategy(ParallelStrategy):
    strategy_name = 'horovod'

    def __init__(self, compression=None, backward_passes_per_step=1, accelerator=None, checkpoint_io=None,
                 precision_plugin=None):
        super().__init__(accelerator=accelerator, parallel_devices=[torch.device('cpu')],
                         cluster_environment=None, checkpoint_io=checkpoint_io, precision_plugin=precision_plugin)
        self._compression = compression
        self._backward_passes_per_step = backward_passes_per_step
        self._exit_stack = None

    # -- ranks --------------------------------------------------------------------------------
    @property
    def root_device(self):
        return torch.device('cpu')

    @property
    def global_rank(self):
        return hvd.rank()

    @property
    def local_rank(self):
        return hvd.local_rank()

    @property
    def node_rank(self):
        return hvd.cross_rank()

    @property
    def world_size(self):
        return hvd.size()

    @property
    def distributed_sampler_kwargs(self):
        return dict(num_replicas=hvd.size(), rank=hvd.rank())

    @property
    def handles_gradient_accumulation(self):
        return False

    def set_world_ranks(self):
        # What Lightning's rank_zero_only decorators (loggers, prints) read.
        from lightning_fabric.utilities.rank_zero import rank_zero_only as fabric_rank_zero_only
        from pytorch_lightning.utilities.rank_zero import rank_zero_only
        rank_zero_only.rank = fabric_rank_zero_only.rank = hvd.rank()

    def setup_environment(self):
        if not hvd.is_initialized():
            hvd.init()
        self.set_world_ranks()
        super().setup_environment()

    # -- model and optimizers -----------------------------------------------------------------
    def model_to_device(self):
        if self.model is not None:
            self.model.to(self.root_device)

    def setup(self, trainer):
        super().setup(trainer)
        self._exit_stack = contextlib.ExitStack()
        if not self.optimizers:
            return
        hvd.broadcast_parameters(self.lightning_module.state_dict(), root_rank=0)
        for optimizer in self.optimizers:
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        names = list(self.lightning_module.named_parameters())
        wrapped = []
        for optimizer in self.optimizers:
            if isinstance(optimizer, _DistributedOptimizer):
                wrapped.append(optimizer)
                continue
            mine = {id(p) for group in optimizer.param_groups for p in group['params']}
            new = hvd.DistributedOptimizer(
                optimizer, named_parameters=[(n, p) for n, p in names if id(p) in mine],
                compression=self._compression or hvd.Compression.none,
                backward_passes_per_step=self._backward_passes_per_step)
            for config in self.lr_scheduler_configs:
                if config.scheduler.optimizer is optimizer:
                    config.scheduler.optimizer = new
            wrapped.append(new)
        self.optimizers = wrapped
        for optimizer in self.optimizers:
            # Lightning calls optimizer.step(closure) and the closure runs the backward pass, so
            # step() must not synchronize first: post_backward does, after the backward pass.
            self._exit_stack.enter_context(optimizer.skip_synchronize())

    def post_backward(self, closure_loss):
        super().post_backward(closure_loss)
        trainer = self.lightning_module.trainer
        if trainer is None or not trainer.training:
            return
        if self.lightning_module.automatic_optimization and trainer.fit_loop.epoch_loop._should_accumulate():
            return  # gradients accumulate: they are averaged after the step's last backward pass
        for optimizer in self.optimizers:
            optimizer.synchronize()

    def teardown(self):
        if self._exit_stack is not None:
            self._exit_stack.close()
            self._exit_stack = None
        # ParallelStrategy.teardown tears down a cluster environment; there is none here.
        super(ParallelStrategy, self).teardown()

    # -- collectives --------------------------------------------------------------------------
    def reduce(self, tensor, group=None, reduce_op='mean'):
        """Horovod allreduce of a tensor (mean unless ``reduce_op`` is 'sum'/ReduceOp.SUM, or
        'max'/'min'); anything else is returned unchanged."""
        if not isinstance(tensor, torch.Tensor):
            return tensor
        if group is not None:
            raise ValueError('HorovodStrategy.reduce: process groups are not supported (group={!r})'.format(group))
        op = str(getattr(reduce_op, 'name', reduce_op) or 'mean').lower().split('.')[-1]
        ops = {'mean': hvd.Average, 'avg': hvd.Average, 'sum': hvd.Sum, 'max': hvd.Max, 'min': hvd.Min}
        if op not in ops:
            raise ValueError('HorovodStrategy.reduce: unsupported reduce_op {!r}'.format(reduce_op))
        original_dtype = tensor.dtype
        if not tensor.is_floating_point() and ops[op] is hvd.Average:
            tensor = tensor.double()
        result = hvd.allreduce(tensor.detach(), op=ops[op])
        return result if ops[op] is hvd.Average else result.to(original_dtype)

    def all_gather(self, tensor, group=None, sync_grads=False):
        """(world_size, *tensor.shape): every rank's ``tensor``."""
        if group is not None:
            raise ValueError('HorovodStrategy.all_gather: process groups are not supported')
        if sync_grads:
            return hvd.allgather(tensor.unsqueeze(0))
        return hvd.allgather(tensor.detach().unsqueeze(0))

    def broadcast(self, obj, src=0):
        return hvd.broadcast_object(obj, root_rank=src)

    def barrier(self, name=None):
        hvd.barrier()
