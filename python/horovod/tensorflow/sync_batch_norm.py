"""SyncBatchNormalization: Keras batch normalization whose training-mode statistics are those of
the global batch (every rank's local batch together).

With more than one rank, the batch mean and variance come from one Sum-allreduce of this rank's
[mean, mean of squares], divided by the number of ranks: variance = E[x^2] - E[x]^2 over all
ranks. That is the full batch's statistics when every rank has a batch of the same size (with a
Keras mask, masked sums and counts are reduced instead, which is exact for any batch sizes). The
reduction is differentiable, so gradients flow through the global statistics. Inference uses the
moving statistics, as plain batch normalization.

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
_ACCEPTS_FUSED = 'fused' in inspect.signature(_BatchNormalization.__init__).parameters


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
        axes = list(axes)
        if mask is None:
            mean = tf.reduce_mean(inputs, axes, keepdims=keep_dims)
            mean_sq = tf.reduce_mean(tf.square(inputs), axes, keepdims=keep_dims)
            summed = _mpi._allreduce(tf.stack([mean, mean_sq]), op=_mpi.Sum)
            n = tf.cast(_mpi.size(), inputs.dtype)
            global_mean, global_mean_sq = summed[0] / n, summed[1] / n
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(inputs)),
                              inputs.dtype)
            sums = tf.stack([tf.reduce_sum(inputs * weights, axes, keepdims=keep_dims),
                             tf.reduce_sum(tf.square(inputs) * weights, axes, keepdims=keep_dims),
                             tf.reduce_sum(weights, axes, keepdims=keep_dims)])
            summed = _mpi._allreduce(sums, op=_mpi.Sum)
            count = tf.maximum(summed[2], tf.keras.backend.epsilon())
            global_mean, global_mean_sq = summed[0] / count, summed[1] / count
        variance = tf.maximum(global_mean_sq - tf.square(global_mean), 0.0)
        return global_mean, variance
