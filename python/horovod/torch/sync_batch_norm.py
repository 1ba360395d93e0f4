"""SyncBatchNorm: batch normalization with statistics computed over every rank's batch."""

import torch
import torch.nn.functional as F
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from horovod.torch.async_ops import (Sum, allgather_async, allreduce_async, rank,
                                     synchronize)
from horovod.common.process_sets import global_process_set


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous version of N-dimensional BatchNorm.

    In this version, normalization parameters are synchronized across workers during forward
    pass. This is very useful in situations where each worker can fit a very small number of
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
        process_set: the ranks whose batches form the global batch; every rank of the set must
            call the module the same number of times. Default: the global process set.

    Input may be on any device the collective backends serve (the CPU always; CUDA in a build
    with a CUDA backend), in any memory format (channels-last input gives channels-last output).
    Batch sizes may differ between ranks, and a rank may have an empty batch as long as the
    set's batches hold more than one value per channel together. The statistics are those of
    the set's batches concatenated: the output, running statistics and input gradient equal a
    single-process BatchNorm over that batch. The weight and bias gradients are this rank's
    share; the distributed optimizer's allreduce of gradients sums them.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError('expected at least 2D input (got {}D input)'.format(input.dim()))

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            self._average_factor(), self.eps)

    @torch.jit.unused
    def _maybe_run_sync_bn(self, input):
        if self.process_set.included() is False:
            raise ValueError('SyncBatchNorm: Rank {} is not a member of the provided process '
                             'set.'.format(rank()))
        if self.process_set.size() == 1:
            return self._run_bn(input)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, self.running_mean,
                                    self.running_var, self.eps, self._average_factor(),
                                    self.process_set)

    def _average_factor(self):
        # torch's rule: momentum None means a cumulative moving average
        if self.momentum is None:
            return 1.0 / float(self.num_batches_tracked) if self.track_running_stats else 0.0
        return self.momentum

    def forward(self, input):
        self._check_input_dim(input)

        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1

        # Eval mode with running statistics normalizes with them, locally. Training, or eval
        # without running statistics, uses the statistics of the set's global batch (Horovod's
        # rule; torch's own SyncBatchNorm uses local batch statistics in the latter case).
        if not self.training and self.track_running_stats:
            return self._run_bn(input)
        return self._maybe_run_sync_bn(input)


def _channel_shape(input):
    return [1, input.size(1)] + [1] * (input.dim() - 2)


def _reduce_dims(input):
    return [0] + list(range(2, input.dim()))


def _keep_memory_format(tensor):
    """The tensor itself when it is contiguous in channels-first or channels-last order (what
    torch's SyncBatchNorm accepts as is), else a contiguous copy."""
    if tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last):
        return tensor
    if tensor.dim() == 5 and tensor.is_contiguous(memory_format=torch.channels_last_3d):
        return tensor
    return tensor.contiguous()


def _compute_dtype(dtype):
    # half precision inputs are normalized in fp32, as torch's kernels accumulate them
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _local_stats(input, compute_dtype, eps):
    """This rank's element count per channel, mean and invstd = 1/sqrt(biased var + eps);
    an empty batch contributes count 0 and zeros (as torch's SyncBatchNorm)."""
    channels = input.size(1)
    count = input.numel() // channels if channels else 0
    if count == 0:
        zeros = torch.zeros(channels, dtype=compute_dtype, device=input.device)
        return count, zeros, zeros.clone()
    var, mean = torch.var_mean(input.to(compute_dtype), dim=_reduce_dims(input), unbiased=False)
    return count, mean, torch.rsqrt(var + eps)


def _global_stats(counts, means, invstds, eps):
    """Combines per-rank (count, mean, invstd) rows into the global batch's mean and biased
    variance (in fp64: the rows are few and small). Ranks with count 0 carry no weight."""
    counts = counts.view(-1).to(torch.float64)
    keep = counts > 0
    counts, means, invstds = counts[keep], means[keep].double(), invstds[keep].double()
    weights = counts.unsqueeze(1)
    total = counts.sum()
    mean = (weights * means).sum(dim=0) / total
    variances = invstds.pow(-2) - eps
    # Chan et al.'s pairwise rule: sum of within-rank and between-rank squared deviations.
    var = (weights * (variances + (means - mean).pow(2))).sum(dim=0) / total
    return total.item(), mean, var.clamp_min(0)


class _SyncBatchNorm(Function):
    """Statistics over every rank's batch, written with plain tensor ops (device-neutral): each
    rank allgathers its count, mean and invstd; the backward allreduces (Sum) the two per-channel
    sums the input gradient needs, as torch's SyncBatchNorm does."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        input = _keep_memory_format(input)
        compute_dtype = _compute_dtype(input.dtype)
        count, mean, invstd = _local_stats(input, compute_dtype, eps)

        count_handle = allgather_async(torch.tensor([[count]], dtype=torch.int64),
                                       name='sync_batch_norm.count', process_set=process_set)
        mean_handle = allgather_async(mean.unsqueeze(0), name='sync_batch_norm.mean',
                                      process_set=process_set)
        invstd_handle = allgather_async(invstd.unsqueeze(0), name='sync_batch_norm.invstd',
                                        process_set=process_set)
        counts = synchronize(count_handle)                             # [n, 1]
        means = synchronize(mean_handle).to(input.device)              # [n, C]
        invstds = synchronize(invstd_handle).to(input.device)          # [n, C]

        # Every rank holds the same counts, so every rank raises here (no rank is left waiting).
        if counts.sum().item() <= 1:
            raise ValueError(
                'SyncBatchNorm: expected more than 1 value per channel when training, got {} '
                'over the process set (per-rank values per channel: {})'.format(
                    counts.sum().item(), counts.view(-1).tolist()))
        total, global_mean, global_var = _global_stats(counts.to(input.device), means, invstds,
                                                       eps)

        if running_mean is not None:
            with torch.no_grad():
                unbiased = global_var * (total / (total - 1))
                running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype),
                                                     alpha=momentum)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype),
                                                    alpha=momentum)

        shape = _channel_shape(input)
        mean = global_mean.to(compute_dtype)
        invstd = torch.rsqrt(global_var + eps).to(compute_dtype)
        out = (input.to(compute_dtype) - mean.view(shape)) * invstd.view(shape)
        if weight is not None:
            out = out * weight.to(compute_dtype).view(shape) + bias.to(compute_dtype).view(shape)
        ctx.save_for_backward(input, weight, mean, invstd)
        ctx.total = total
        ctx.process_set = process_set
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = _keep_memory_format(grad_output)
        saved_input, weight, mean, invstd = ctx.saved_tensors
        need_input_grad, need_weight_grad, need_bias_grad = ctx.needs_input_grad[0:3]
        dims = _reduce_dims(saved_input)
        shape = _channel_shape(saved_input)
        # An empty batch gives zero sums: this rank still takes part in the allreduces below.
        dy = grad_output.to(mean.dtype)
        xmu = saved_input.to(mean.dtype) - mean.view(shape)
        sum_dy = dy.sum(dim=dims)
        sum_dy_xmu = (dy * xmu).sum(dim=dims)

        # grad_weight / grad_bias stay local: the optimizer allreduces them.
        grad_weight = (sum_dy_xmu * invstd).to(weight.dtype) \
            if weight is not None and need_weight_grad else None
        grad_bias = sum_dy.to(weight.dtype) if weight is not None and need_bias_grad else None

        grad_input = None
        if need_input_grad:
            sum_dy_handle = allreduce_async(sum_dy, op=Sum, name='sync_batch_norm.sum_dy',
                                            process_set=ctx.process_set)
            sum_dy_xmu_handle = allreduce_async(sum_dy_xmu, op=Sum,
                                                name='sync_batch_norm.sum_dy_xmu',
                                                process_set=ctx.process_set)
            mean_dy = synchronize(sum_dy_handle) / ctx.total
            mean_dy_xmu = synchronize(sum_dy_xmu_handle) / ctx.total
            scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
            grad_input = (dy - mean_dy.view(shape)
                          - xmu * (invstd * invstd * mean_dy_xmu).view(shape)) * scale.view(shape)
            grad_input = grad_input.to(saved_input.dtype)

        return grad_input, grad_weight, grad_bias, None, None, None, None, None
