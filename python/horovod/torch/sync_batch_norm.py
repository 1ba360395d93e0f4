"""SyncBatchNorm: batch normalization with statistics computed over every rank's batch."""

import torch
import torch.nn.functional as F
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from horovod.torch.mpi_ops import Sum, allgather_async, allreduce_async, size, synchronize


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous version of N-dimensional BatchNorm.

    In this version, normalization parameters are synchronized across workers during forward
    pass. This is very useful in situations where each GPU can fit a very small number of
    examples.

    See https://pytorch.org/docs/stable/nn.html#batchnorm2d for more details about BatchNorm.

    Arguments:
        num_features: number of channels `C` from the shape `(N, C, ...)`
        eps: a value added to the denominator for numerical stability. Default: 1e-5
        momentum: the value used for the running_mean and running_var computation. Can be set
            to `None` for cumulative moving average (i.e. simple average). Default: 0.1
        affine: a boolean value that when set to `True`, this module has learnable affine
            parameters. Default: `True`
        track_running_stats: a boolean value that when set to `True`, this module tracks the
            running mean and variance, and when set to `False`, this module does not track such
            statistics and always uses batch statistics in both training and eval modes.
            Default: `True`

    .. note:: Only GPU input tensors are supported in the training mode (as Horovod).
    """

    # Horovod only accepts CUDA input. The statistics math below also works on CPU tensors;
    # tests flip this to exercise it on CPU-only machines.
    _allow_cpu_input = False

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError('expected at least 2D input (got {}D input)'.format(input.dim()))

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, self.momentum,
                            self.eps)

    @torch.jit.unused
    def _maybe_run_sync_bn(self, input):
        if size() == 1:
            return self._run_bn(input)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, self.running_mean,
                                    self.running_var, self.eps, self.momentum)

    def forward(self, input):
        # Horovod: only GPU input is supported by the underlying kernels.
        if not input.is_cuda and not self._allow_cpu_input:
            raise ValueError('SyncBatchNorm expected input tensor to be on GPU')

        self._check_input_dim(input)

        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1

        if not self.training and self.track_running_stats:
            return self._run_bn(input)
        return self._maybe_run_sync_bn(input)


class _SyncBatchNorm(Function):
    @staticmethod
    def forward(self, input, weight, bias, running_mean, running_var, eps, momentum):
        input = input.contiguous()

        count = torch.tensor([input.numel() // input.size(1)], dtype=torch.float32)

        # local mean/invstd
        mean, invstd = torch.batch_norm_stats(input, eps)

        count_handle = allgather_async(count.unsqueeze(0), name='sync_batch_norm.count')
        mean_handle = allgather_async(mean.unsqueeze(0), name='sync_batch_norm.mean')
        invstd_handle = allgather_async(invstd.unsqueeze(0), name='sync_batch_norm.invstd')

        count_all = synchronize(count_handle)
        mean_all = synchronize(mean_handle)
        invstd_all = synchronize(invstd_handle)

        counts = count_all.view(-1).to(input.device)
        mean, invstd = torch.batch_norm_gather_stats_with_counts(
            input, mean_all, invstd_all, running_mean, running_var, momentum, eps, counts)

        self.save_for_backward(input, weight, mean, invstd, count_all)

        # element-wise normalization
        return torch.batch_norm_elemt(input, weight, bias, mean, invstd, eps)

    @staticmethod
    def backward(self, grad_output):
        grad_output = grad_output.contiguous()
        saved_input, weight, mean, invstd, count_all = self.saved_tensors
        need_input_grad, need_weight_grad, need_bias_grad = self.needs_input_grad[0:3]

        # local stats and grad_weight / grad_bias
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = torch.batch_norm_backward_reduce(
            grad_output, saved_input, mean, invstd, weight,
            need_input_grad, need_weight_grad, need_bias_grad)

        if need_input_grad:
            # the statistics the input gradient needs, summed over ranks
            sum_dy_handle = allreduce_async(sum_dy, op=Sum, name='sync_batch_norm.sum_dy')
            sum_dy_xmu_handle = allreduce_async(sum_dy_xmu, op=Sum,
                                                name='sync_batch_norm.sum_dy_xmu')
            sum_dy = synchronize(sum_dy_handle)
            sum_dy_xmu = synchronize(sum_dy_xmu_handle)

            count_all = count_all.to(dtype=torch.int, device=grad_output.device).view(-1)
            grad_input = torch.batch_norm_backward_elemt(
                grad_output, saved_input, mean, invstd, weight, sum_dy, sum_dy_xmu, count_all)
        else:
            grad_input = None

        # grad_weight / grad_bias stay local: the optimizer allreduces them.
        if weight is None or not need_weight_grad:
            grad_weight = None
        if weight is None or not need_bias_grad:
            grad_bias = None

        return grad_input, grad_weight, grad_bias, None, None, None, None
