"""Data loaders of the Spark estimators (Horovod 0.28.1's ``horovod.spark.data_loaders``)."""
