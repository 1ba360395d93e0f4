"""Spark estimator for PyTorch: ``TorchEstimator(...).fit(df)`` -> ``TorchModel``."""

from horovod.spark.torch.estimator import TorchEstimator
from horovod.spark.torch.model import TorchModel

__all__ = ['TorchEstimator', 'TorchModel']
