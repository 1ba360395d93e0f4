"""Spark estimator for Keras: not available yet.

``KerasEstimator`` / ``KerasModel`` train through ``horovod.tensorflow.keras``, the Keras adapter,
which is being built separately and has not landed in this package. Until it has, constructing
either raises NotImplementedError naming what is missing; ``horovod.spark.torch.TorchEstimator``
is available now."""

__all__ = ['KerasEstimator', 'KerasModel']

_MISSING = ('horovod.spark.keras.{} needs the Keras adapter (horovod.tensorflow.keras / horovod.keras), which '
            'has not landed in this build yet. Use horovod.spark.torch.TorchEstimator meanwhile.')


class KerasEstimator:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_MISSING.format('KerasEstimator'))


class KerasModel:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_MISSING.format('KerasModel'))
