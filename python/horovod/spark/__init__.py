"""Horovod on Spark: ``run(fn, ...)`` runs a Horovod job in the tasks of a barrier stage of the
active SparkContext; ``horovod.spark.torch.TorchEstimator`` trains a torch model on a DataFrame.

``run_elastic`` runs an elastic job (one task per worker). See docs/spark.md.
"""

from horovod.spark.runner import run, run_elastic

__all__ = ['run', 'run_elastic']
