"""The torch estimator's data modules (``TorchEstimator(data_module=...)``; Horovod's
``horovod.spark.torch.datamodule``). ``ShardDataModule`` is the default: every process streams
its shard of the store's Parquet files with horovod.spark.common.reader (the estimator's reader
parameters), ``categorical_cols`` as int64 and ``continuous_cols`` as float32 columns.
``PetastormDataModule`` is Horovod's name for the default, kept so that code subclassing it
works (this build reads with pyarrow, not Petastorm). ``NVTabularDataModule`` raises
NotImplementedError (NVTabular needs a CUDA GPU and RAPIDS).

What the estimator takes from a data module's ``train_data()`` / ``val_data()``: an iterable of
batches; it takes ``steps_per_epoch_train`` (``steps_per_epoch_val``) batches per epoch from one
iterator, starting a new pass (``iter()`` again) when the iterable ends. A batch is a dict
{column: tensor or numpy array} holding the feature and label columns (and the sample weight
column), or a ``(features, labels)`` pair: a dict of feature columns and a dict of label columns,
a list of tensors (one per label column) or one tensor (one label column)."""

from horovod.spark.common.datamodule import DataModule, NVTabularDataModule, TypedStream

__all__ = ['ShardDataModule', 'PetastormDataModule', 'NVTabularDataModule']


class ShardDataModule(DataModule):
    """This rank's shard of the training (validation) data as {column: tensor} batches: every
    epoch goes through as many rows as the largest shard has (``train_epoch_rows``, which the
    estimator passes), a smaller shard going around again."""
    short_name = 'shard'

    def __init__(self, train_epoch_rows=None, val_epoch_rows=None, **kwargs):
        super().__init__(**kwargs)
        self.train_epoch_rows, self.val_epoch_rows = train_epoch_rows, val_epoch_rows
        self._streams = []

    def __exit__(self, exc_type, exc_value, traceback):
        for stream in self._streams:
            stream.close()
        self._streams = []
        return super().__exit__(exc_type, exc_value, traceback)

    def _loader(self, train):
        from horovod.spark.common.reader import BatchStream
        from horovod.spark.data_loaders.pytorch_data_loaders import PytorchShardLoader
        reader = self.shard_reader(train)
        total = (self.train_epoch_rows if train else self.val_epoch_rows) or reader.rows
        steps = self.steps_per_epoch_train if train else self.steps_per_epoch_val
        stream = TypedStream(BatchStream(reader, total, self.train_batch_size if train else self.val_batch_size,
                                         steps), self.categorical_cols, self.continuous_cols)
        self._streams.append(stream)
        return PytorchShardLoader(stream)

    def train_data(self):
        return self._loader(train=True)

    def val_data(self):
        return self._loader(train=False) if self.has_val else None


PetastormDataModule = ShardDataModule
