"""Horovod on Spark: ``run(fn, ...)`` runs a Horovod job in the tasks of a barrier stage of the
active SparkContext; ``horovod.spark.torch.TorchEstimator`` trains a torch model on a DataFrame.

See docs/spark.md. ``run_elastic`` is not available until elastic training lands.
"""

from horovod.spark.runner import run, run_elastic

__all__ = ['run', 'run_elastic']
