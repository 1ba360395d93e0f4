"""``ShardDataModule``: the LightningDataModule that the Lightning estimator trains on, over the
Parquet data that prepare_data wrote to the store.

Every process streams its shard (every ``size``-th file, horovod.spark.common.reader, with the
estimator's reader parameters) and iterates it with a PytorchShardLoader (async when a queue size
is given). A batch is a dict {column: tensor} over the feature, label (and sample weight)
columns, features and labels reshaped to ``input_shapes`` / ``label_shapes`` when given, so a
``training_step`` reads ``batch['features']``, ``batch['label']``. Every rank takes the same
number of steps per epoch (an epoch is as many rows as the largest shard has; smaller shards go
around again, as in the torch estimator); ``train_steps_per_epoch`` /
``validation_steps_per_epoch`` set the steps instead (the next epoch goes on where one stopped)."""

import pytorch_lightning as pl
import torch

import horovod.torch as hvd
from horovod.spark.common.reader import BatchStream, ShardReader, epoch_rows
from horovod.spark.data_loaders.pytorch_data_loaders import PytorchShardAsyncLoader, PytorchShardLoader

__all__ = ['ShardDataModule']


class ShardDataModule(pl.LightningDataModule):
    def __init__(self, store, train_path, val_path, columns, shapes, batch_size, val_batch_size, readers,
                 random_seed, train_steps_per_epoch, validation_steps_per_epoch, train_queue_size=None,
                 val_queue_size=None, verbose=False):
        super().__init__()
        self.store, self.train_path, self.val_path = store, train_path, val_path
        self.columns, self.shapes = list(columns), dict(shapes)
        self.batch_size, self.val_batch_size, self.readers = batch_size, val_batch_size, readers
        self.random_seed = random_seed
        self.train_steps, self.val_steps = train_steps_per_epoch, validation_steps_per_epoch
        self.train_queue_size, self.val_queue_size = train_queue_size, val_queue_size
        self.verbose = verbose
        self.streams = []

    def _loader(self, path, batch_size, options, what, steps, queue_size):
        reader = ShardReader(self.store, path, self.columns, hvd.rank(), hvd.size(),
                             seed=(self.random_seed or 0) + hvd.rank(), **options)
        total = epoch_rows(hvd.allgather(torch.tensor([reader.rows]), name='lightning_' + what + '_rows').tolist(),
                           what)
        stream = BatchStream(reader, total, batch_size, steps)
        self.streams.append(stream)
        if queue_size:
            return PytorchShardAsyncLoader(queue_size, stream, self.shapes)
        return PytorchShardLoader(stream, self.shapes)

    def teardown(self, stage=None):
        for stream in self.streams:
            stream.close()
        self.streams = []

    def train_dataloader(self):
        return self._loader(self.train_path, self.batch_size, self.readers['train'], 'training', self.train_steps,
                            self.train_queue_size)

    def val_dataloader(self):
        if self.val_path is None:
            return []
        return self._loader(self.val_path, self.val_batch_size, self.readers['val'], 'validation', self.val_steps,
                            self.val_queue_size)
