"""DistributedOptimizer (mx.optimizer) and DistributedTrainer (Gluon) for MXNet."""

import warnings

import mxnet as mx

from horovod.common.process_sets import global_process_set
from horovod.mxnet import mpi_ops
from horovod.mxnet.compression import Compression


def _set_size(process_set):
    return mpi_ops.size() if process_set.process_set_id == 0 else process_set.size()


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps an ``mx.optimizer.Optimizer``: ``update`` and ``update_multi_precision`` average
    the gradient(s) over ``process_set`` in place (allreduce_, named by the parameter index;
    with ``num_groups`` > 0, grouped allreduces named ``"<first>:<last>"``) before the wrapped
    optimizer updates. ``gradient_predivide_factor`` f scales gradients by 1/f before the sum
    and by f/size after it. Other attributes are the wrapped optimizer's."""

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0,
                 process_set=global_process_set):
        self._optimizer = optimizer
        self._gradient_predivide_factor = gradient_predivide_factor
        self._num_groups = num_groups
        self._process_set = process_set

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def _do_allreduce(self, index, grad):
        if _set_size(self._process_set) == 1:
            return
        pre = 1.0 / self._gradient_predivide_factor
        post = self._gradient_predivide_factor
        if isinstance(index, (tuple, list)):
            if self._num_groups > 0:
                n = len(index)
                per = -(-n // self._num_groups)
                for start in range(0, n, per):
                    idx, grads = index[start:start + per], grad[start:start + per]
                    mpi_ops.grouped_allreduce_(grads, op=mpi_ops.Average,
                                               name='{}:{}'.format(idx[0], idx[-1]),
                                               priority=-start, prescale_factor=pre,
                                               postscale_factor=post,
                                               process_set=self._process_set)
            else:
                for i in range(len(index)):
                    mpi_ops.allreduce_(grad[i], op=mpi_ops.Average, name=str(index[i]),
                                       priority=-i, prescale_factor=pre, postscale_factor=post,
                                       process_set=self._process_set)
        else:
            mpi_ops.allreduce_(grad, op=mpi_ops.Average, name=str(index), prescale_factor=pre,
                               postscale_factor=post, process_set=self._process_set)

    def update(self, index, weight, grad, state):
        self._do_allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self._do_allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class DistributedTrainer(mx.gluon.Trainer):
    """A Gluon Trainer (no kvstore) whose ``step`` sums the gradients over ``process_set`` with
    Horovod (named ``prefix + str(i)`` in sorted parameter order) and folds the division by the
    set size (and ``gradient_predivide_factor``) into the optimizer's rescale_grad."""

    def __init__(self, params, optimizer, optimizer_params=None,
                 compression=Compression.none, gradient_predivide_factor=1.0, prefix=None,
                 num_groups=0, process_set=global_process_set):
        self._compression = compression
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn('DistributedTrainer does not take DistributedOptimizer as its '
                          'optimizer. We have unwrapped it for you.')
        if isinstance(params, mx.gluon.ParameterDict):
            params = [params[key] for key in sorted(params.keys())]
        elif isinstance(params, dict):
            params = [params[key] for key in sorted(params)]
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._gradient_predivide_factor = gradient_predivide_factor
        self._scale *= gradient_predivide_factor / _set_size(process_set)
        self._prefix = prefix or ''
        self._num_groups = num_groups
        self._process_set = process_set

    def _allreduce_grads(self):
        if _set_size(self._process_set) == 1:
            return
        pre = 1.0 / self._gradient_predivide_factor
        live = [(i, p) for i, p in enumerate(self._params) if p.grad_req != 'null']
        if self._num_groups > 0:
            per = -(-len(live) // self._num_groups)
            for start in range(0, len(live), per):
                chunk = live[start:start + per]
                grads = [p.list_grad()[0] for _, p in chunk]
                mpi_ops.grouped_allreduce_(
                    grads, op=mpi_ops.Sum, priority=-start, prescale_factor=pre,
                    name='{}{}:{}{}'.format(self._prefix, chunk[0][0], self._prefix,
                                            chunk[-1][0]),
                    process_set=self._process_set)
            return
        for i, param in live:
            grad = param.list_grad()[0]
            compressed, ctx = self._compression.compress(grad)
            mpi_ops.allreduce_(compressed, op=mpi_ops.Sum, name=self._prefix + str(i),
                               priority=-i, prescale_factor=pre,
                               process_set=self._process_set)
            if self._compression is not Compression.none:
                grad[:] = self._compression.decompress(compressed, ctx)
