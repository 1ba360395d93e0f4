"""Spark estimator for Keras (Keras 3, or tf-keras 2): ``KerasEstimator(...).fit(df)`` ->
``KerasModel``."""

from horovod.spark.keras.estimator import KerasEstimator
from horovod.spark.keras.model import KerasModel

__all__ = ['KerasEstimator', 'KerasModel']

