"""The Keras estimator's data modules (Horovod's ``horovod.spark.keras.datamodule``).
``KerasEstimator(data_module=...)`` takes a ``DataModule`` subclass (horovod.spark.common.datamodule)
whose ``train_data()`` / ``val_data()`` ``model.fit`` trains on; without one, or with
``PetastormDataModule`` (Horovod's default, by name), the estimator streams the shards itself
(docs/spark.md). ``NVTabularDataModule`` raises NotImplementedError (NVTabular needs a CUDA GPU
and RAPIDS)."""

from horovod.spark.common.datamodule import DataModule, NVTabularDataModule

__all__ = ['DataModule', 'PetastormDataModule', 'NVTabularDataModule']


class PetastormDataModule(DataModule):
    """Horovod's default Keras data module. ``KerasEstimator(data_module=PetastormDataModule)``
    is the estimator's own streaming feed, as when ``data_module`` is unset (it reshapes the
    columns to the model's inputs, which a data module cannot see). Horovod's built tf.data
    pipelines over Petastorm readers; there are none here, so a subclass that changes how data
    is read subclasses ``DataModule`` and returns its own ``train_data()`` / ``val_data()``."""
    short_name = 'petastorm'

    def train_data(self):
        raise NotImplementedError('PetastormDataModule is the Keras estimator\'s default feed, not a module to '
                                  'subclass here: subclass DataModule and return model.fit\'s data from '
                                  'train_data() / val_data() (docs/spark.md)')

    def val_data(self):
        raise NotImplementedError('PetastormDataModule is the Keras estimator\'s default feed (see train_data)')


def custom_module(data_module):
    """``data_module`` when it is the user's own, None for the default feed (unset, or Horovod's
    default by name)."""
    return None if data_module is None or data_module is PetastormDataModule else data_module
