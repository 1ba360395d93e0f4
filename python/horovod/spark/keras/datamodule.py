"""The Keras estimator's data modules (Horovod's ``horovod.spark.keras.datamodule``).
``KerasEstimator(data_module=...)`` takes a ``DataModule`` subclass (horovod.spark.common.datamodule)
whose ``train_data()`` / ``val_data()`` ``model.fit`` trains on; without one, the estimator
streams the shards itself (docs/spark.md). Horovod's ``PetastormDataModule`` built tf.data
pipelines over Petastorm readers, which this build does not have; ``NVTabularDataModule`` raises
NotImplementedError (NVTabular needs a CUDA GPU and RAPIDS)."""

from horovod.spark.common.datamodule import DataModule, NVTabularDataModule

__all__ = ['DataModule', 'NVTabularDataModule']
