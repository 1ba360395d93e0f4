"""``ShardDataModule``: the LightningDataModule that the Lightning estimator trains on by
default, over the Parquet data that prepare_data wrote to the store (``PetastormDataModule`` is
Horovod's name for it, kept for code that subclasses it; this build reads with pyarrow).

``TorchEstimator(data_module=<class>)`` replaces it: the estimator constructs the class in every
process with Horovod's keyword arguments (``train_dir``, ``val_dir``, ``num_train_epochs``,
``has_val``, ``train_batch_size``, ``val_batch_size``, ``shuffle``, ``num_reader_epochs``,
``reader_pool_type``, ``reader_worker_count``, ``transformation``,
``transformation_edit_fields``, ``transformation_removed_fields``, ``inmemory_cache_all``,
``cur_shard``, ``shard_count``, ``schema_fields``, ``storage_options``,
``steps_per_epoch_train``, ``steps_per_epoch_val``, ``verbose``, ``debug_data_loader``,
``train_async_data_loader_queue_size``, ``val_async_data_loader_queue_size``, ``seed``) plus,
when its constructor takes them (by name or ``**kwargs``), this build's ``store``,
``reader_options``, ``shapes``, ``label_cols``, ``continuous_cols``, ``categorical_cols``,
``train_epoch_rows`` and ``val_epoch_rows``; and passes it to ``Trainer.fit``. Every rank must
yield ``steps_per_epoch_train`` training batches per epoch (each step is a collective).

The default: every process streams its shard (every ``size``-th file, horovod.spark.common.reader,
with the estimator's reader parameters) and iterates it with a PytorchShardLoader (async when a
queue size is given). A batch is a dict {column: tensor} over the feature, label (and sample
weight) columns, features and labels reshaped to ``input_shapes`` / ``label_shapes`` when given,
``categorical_cols`` as int64 and ``continuous_cols`` as float32, so a ``training_step`` reads
``batch['features']``, ``batch['label']``. An epoch is as many rows as the largest shard has
(``train_epoch_rows``; smaller shards go around again, as in the torch estimator), in
``steps_per_epoch_train`` batches (the next epoch goes on where one stopped)."""

import pytorch_lightning as pl

from horovod.spark.common.datamodule import TypedStream
from horovod.spark.common.reader import BatchStream, ShardReader
from horovod.spark.data_loaders.pytorch_data_loaders import PytorchShardAsyncLoader, PytorchShardLoader

__all__ = ['ShardDataModule', 'PetastormDataModule']


class ShardDataModule(pl.LightningDataModule):
    def __init__(self, train_dir, val_dir, num_train_epochs=1, has_val=True, train_batch_size=32,
                 val_batch_size=32, shuffle=True, num_reader_epochs=None, reader_pool_type='thread',
                 reader_worker_count=2, transformation=None, transformation_edit_fields=None,
                 transformation_removed_fields=None, inmemory_cache_all=False, cur_shard=0, shard_count=1,
                 schema_fields=None, storage_options=None, steps_per_epoch_train=1, steps_per_epoch_val=1,
                 verbose=True, debug_data_loader=False, train_async_data_loader_queue_size=None,
                 val_async_data_loader_queue_size=None, seed=None, store=None, reader_options=None, shapes=None,
                 continuous_cols=None, categorical_cols=None, train_epoch_rows=None, val_epoch_rows=None, **kwargs):
        super().__init__()
        if store is None or reader_options is None:
            raise ValueError('ShardDataModule reads through the store: it needs store= and reader_options= (the '
                             'estimator passes them)')
        self.train_dir, self.val_dir, self.has_val = train_dir, val_dir, has_val
        self.num_train_epochs, self.shuffle = num_train_epochs, shuffle
        self.train_batch_size, self.val_batch_size = train_batch_size, val_batch_size
        self.cur_shard, self.shard_count, self.schema_fields = cur_shard, shard_count, list(schema_fields)
        self.steps_per_epoch_train, self.steps_per_epoch_val = steps_per_epoch_train, steps_per_epoch_val
        self.verbose, self.debug_data_loader, self.seed = verbose, debug_data_loader, seed
        self.train_async_data_loader_queue_size = train_async_data_loader_queue_size
        self.val_async_data_loader_queue_size = val_async_data_loader_queue_size
        self.store, self.reader_options, self.shapes = store, reader_options, dict(shapes or {})
        self.continuous_cols, self.categorical_cols = list(continuous_cols or []), list(categorical_cols or [])
        self.train_epoch_rows, self.val_epoch_rows = train_epoch_rows, val_epoch_rows
        self.streams = []

    def _loader(self, train):
        reader = ShardReader(self.store, self.train_dir if train else self.val_dir, self.schema_fields,
                             self.cur_shard, self.shard_count, seed=(self.seed or 0) + self.cur_shard,
                             **self.reader_options['train' if train else 'val'])
        total = (self.train_epoch_rows if train else self.val_epoch_rows) or reader.rows
        stream = TypedStream(BatchStream(reader, total, self.train_batch_size if train else self.val_batch_size,
                                         self.steps_per_epoch_train if train else self.steps_per_epoch_val),
                             self.categorical_cols, self.continuous_cols)
        self.streams.append(stream)
        queue_size = self.train_async_data_loader_queue_size if train else self.val_async_data_loader_queue_size
        if queue_size:
            return PytorchShardAsyncLoader(queue_size, stream, self.shapes)
        return PytorchShardLoader(stream, self.shapes)

    def teardown(self, stage=None):
        for stream in self.streams:
            stream.close()
        self.streams = []

    def train_dataloader(self):
        return self._loader(train=True)

    def val_dataloader(self):
        if not self.has_val:
            return []
        return self._loader(train=False)


PetastormDataModule = ShardDataModule
