"""SyncBatchNormalization: Keras batch normalization whose training-mode statistics are those of
the global batch (every rank's local batch together).

With more than one rank, the batch mean and variance come from one Sum-allreduce of this rank's
per-channel [sum, sum of squares, count] (with a Keras mask, the masked ones): variance =
E[x^2] - E[x]^2 over the global batch. That is exact for any batch sizes, a rank with an empty
batch included. The reduction is differentiable, so gradients flow through the global
statistics. Inference uses the moving statistics, as plain batch normalization.

Works with Keras 3 (``tf.keras`` on TensorFlow 2.16+) and with tf-keras
(``TF_USE_LEGACY_KERAS=1``): both call ``self._moments`` in training mode, with different
signatures, and both are handled.
"""

import inspect

import tensorflow as tf

from horovod.tensorflow import mpi_ops as _mpi

_BatchNormalization = tf.keras.layers.BatchNormalization
# Keras 3: _moments(inputs, mask); tf-keras: _moments(inputs, reduction_axes, keep_dims,
# mask=None).
_KERAS3_MOMENTS = 'reduction_axes' not in inspect.signature(_BatchNormalization._moments).parameters
# tf-keras takes `fused` in its base class (the subclass's __init__ forwards **kwargs); left out,
# 4-D inputs get the fused kernel, which never calls _moments. Keras 3 has no such argument.
_ACCEPTS_FUSED = any('fused' in inspect.signature(cls.__init__).parameters
                     for cls in _BatchNormalization.__mro__ if '__init__' in vars(cls))


class SyncBatchNormalization(_BatchNormalization):
    """Batch normalization synchronized across all ranks in training mode (``fused`` must be
    False: the fused kernel computes local statistics)."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError('SyncBatchNormalization does not support fused=True.')
        if not kwargs.get('name'):
            kwargs['name'] = 'sync_batch_normalization'
        if _ACCEPTS_FUSED:
            kwargs['fused'] = False
        super().__init__(**kwargs)

    def _moments(self, inputs, *args, **kwargs):
        if _mpi.size() == 1:
            return super()._moments(inputs, *args, **kwargs)
        if _KERAS3_MOMENTS:
            mask = args[0] if args else kwargs.get('mask')
            return self._global_moments(inputs, self._reduction_axes, False, mask)
        reduction_axes = args[0] if args else kwargs['reduction_axes']
        keep_dims = args[1] if len(args) > 1 else kwargs.get('keep_dims', False)
        mask = args[2] if len(args) > 2 else kwargs.get('mask')
        return self._global_moments(inputs, reduction_axes, keep_dims, mask)

    def _global_moments(self, inputs, axes, keep_dims, mask):
        """Mean and biased variance of the global batch from one Sum-allreduce of this rank's
        per-channel [sum, sum of squares, count]: exact for any batch sizes, including an
        empty batch on some ranks (Horovod divided averaged means by the number of ranks,
        which is the global batch's only when every rank's batch has the same size)."""
        axes = list(axes)
        if mask is None:
            weights = None
            count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)), inputs.dtype)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(inputs)),
                              inputs.dtype)
        weighted = inputs if weights is None else inputs * weights
        total = tf.reduce_sum(weighted, axes, keepdims=keep_dims)
        total_sq = tf.reduce_sum(weighted * inputs, axes, keepdims=keep_dims)
        if weights is None:
            counts = tf.fill(tf.shape(total), count)
        else:
            counts = tf.reduce_sum(weights, axes, keepdims=keep_dims)
        summed = _mpi._allreduce(tf.stack([total, total_sq, counts]), op=_mpi.Sum)
        # an all-empty (or all-masked) global batch gives zeros rather than NaN
        count = tf.maximum(summed[2], tf.keras.backend.epsilon())
        global_mean, global_mean_sq = summed[0] / count, summed[1] / count
        variance = tf.maximum(global_mean_sq - tf.square(global_mean), 0.0)
        return global_mean, variance
