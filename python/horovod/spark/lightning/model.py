"""``TorchModel`` of the Lightning estimator: the trained LightningModule as a pyspark.ml
transformer (horovod.spark.torch's TorchModel: one module input per feature column, reshaped
to ``input_shapes``; one output column per module output)."""

from horovod.spark.torch.model import TorchModel as _TorchModel

__all__ = ['TorchModel']


class TorchModel(_TorchModel):
    """``getModel()`` is the LightningModule with the weights of the best checkpoint (the
    ModelCheckpoint's best, or the last epoch's without a monitor); ``getBestModelPath()`` is
    that checkpoint's path in the store (None when the store keeps no runs)."""

    _defaults = dict(_TorchModel._defaults, best_model_path=None)
