"""SyncBatchNorm: batch normalization with statistics computed over every rank's batch."""

import torch
import torch.nn.functional as F
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from horovod.torch.async_ops import Sum, allgather_async, allreduce_async, size, synchronize


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

    # Horovod only accepts CUDA input (and so do we, by default). The statistics below are
    # device-neutral tensor math, so flipping this lets CPU tensors through (tests do).
    _allow_cpu_input = False

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError('expected at least 2D input (got {}D input)'.format(input.dim()))

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            self._average_factor(), self.eps)

    @torch.jit.unused
    def _maybe_run_sync_bn(self, input):
        if size() == 1:
            return self._run_bn(input)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, self.running_mean,
                                    self.running_var, self.eps, self._average_factor())

    def _average_factor(self):
        # torch's rule: momentum None means a cumulative moving average
        if self.momentum is None:
            return 1.0 / float(self.num_batches_tracked) if self.track_running_stats else 0.0
        return self.momentum

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


def _channel_shape(input):
    return [1, input.size(1)] + [1] * (input.dim() - 2)


def _reduce_dims(input):
    return [0] + list(range(2, input.dim()))


class _SyncBatchNorm(Function):
    """Statistics over every rank's batch, written with plain tensor ops (device-neutral): each
    rank allgathers its count, mean and invstd; the backward allreduces (Sum) the two per-channel
    sums the input gradient needs."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        input = input.contiguous()
        dims = _reduce_dims(input)
        shape = _channel_shape(input)
        compute = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input

        count = torch.tensor([[float(input.numel() // input.size(1))]], dtype=compute.dtype)
        mean = compute.mean(dim=dims)
        invstd = torch.rsqrt(compute.var(dim=dims, unbiased=False) + eps)

        count_handle = allgather_async(count, name='sync_batch_norm.count')
        mean_handle = allgather_async(mean.unsqueeze(0), name='sync_batch_norm.mean')
        invstd_handle = allgather_async(invstd.unsqueeze(0), name='sync_batch_norm.invstd')
        counts = synchronize(count_handle).to(input.device)          # [n, 1]
        means = synchronize(mean_handle).to(input.device)            # [n, C]
        invstds = synchronize(invstd_handle).to(input.device)        # [n, C]

        # Combine per-rank (count, mean, biased var) into the global mean and biased var.
        total = counts.sum()
        variances = invstds.pow(-2) - eps
        global_mean = (counts * means).sum(dim=0) / total
        global_var = (counts * (variances + means * means)).sum(dim=0) / total - \
            global_mean * global_mean
        global_var = global_var.clamp_min(0)
        global_invstd = torch.rsqrt(global_var + eps)

        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype),
                                                     alpha=momentum)
                unbiased = global_var * (total / (total - 1)) if total > 1 else global_var
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype),
                                                    alpha=momentum)

        out = (compute - global_mean.view(shape)) * global_invstd.view(shape)
        if weight is not None:
            out = out * weight.view(shape) + bias.view(shape)
        ctx.save_for_backward(input, weight, global_mean, global_invstd, total)
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        saved_input, weight, mean, invstd, total = ctx.saved_tensors
        need_input_grad, need_weight_grad, need_bias_grad = ctx.needs_input_grad[0:3]
        dims = _reduce_dims(saved_input)
        shape = _channel_shape(saved_input)
        dy = grad_output.to(mean.dtype)
        xmu = saved_input.to(mean.dtype) - mean.view(shape)

        sum_dy = dy.sum(dim=dims)
        sum_dy_xmu = (dy * xmu).sum(dim=dims)
        grad_weight = (sum_dy_xmu * invstd).to(weight.dtype) \
            if weight is not None and need_weight_grad else None
        grad_bias = sum_dy.to(weight.dtype) if weight is not None and need_bias_grad else None

        grad_input = None
        if need_input_grad:
            sum_dy_handle = allreduce_async(sum_dy, op=Sum, name='sync_batch_norm.sum_dy')
            sum_dy_xmu_handle = allreduce_async(sum_dy_xmu, op=Sum,
                                                name='sync_batch_norm.sum_dy_xmu')
            sum_dy = synchronize(sum_dy_handle)
            sum_dy_xmu = synchronize(sum_dy_xmu_handle)
            scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
            grad_input = (dy - (sum_dy / total).view(shape)
                          - xmu * (invstd * invstd * sum_dy_xmu / total).view(shape)) \
                * scale.view(shape)
            grad_input = grad_input.to(saved_input.dtype)

        # grad_weight / grad_bias stay local: the optimizer allreduces them.
        return grad_input, grad_weight, grad_bias, None, None, None, None
