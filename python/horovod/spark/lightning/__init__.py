"""Spark estimator for PyTorch Lightning (Horovod's ``horovod.spark.lightning``):
``TorchEstimator(model=<LightningModule>, ...).fit(df)`` -> ``TorchModel``. See docs/spark.md."""

from horovod.spark.lightning.estimator import TorchEstimator
from horovod.spark.lightning.model import TorchModel
from horovod.spark.lightning.strategy import HorovodStrategy

__all__ = ['TorchEstimator', 'TorchModel', 'HorovodStrategy']
