"""``ShardDataModule``: the LightningDataModule that the Lightning estimator trains on, over the
Parquet data that prepare_data wrote to the store.

Every process loads its shard (every ``size``-th file, horovod.spark.common.reader) into memory
and iterates it with a PytorchDataLoader (async when a queue size is given). A batch is a dict
{column: tensor} over the feature, label (and sample weight) columns, features and labels
reshaped to ``input_shapes`` / ``label_shapes`` when given, so a ``training_step`` reads
``batch['features']``, ``batch['label']``. Every rank takes the same number of steps per epoch
(an epoch is as many rows as the largest shard has; smaller shards wrap around, as in the torch
estimator); ``train_steps_per_epoch`` / ``validation_steps_per_epoch`` cut epochs shorter."""

import pytorch_lightning as pl
import torch

import horovod.torch as hvd
from horovod.spark.common.reader import epoch_order, epoch_rows, read_shard
from horovod.spark.data_loaders.pytorch_data_loaders import PytorchAsyncDataLoader, PytorchDataLoader

__all__ = ['ShardDataModule']


class _ShardEpoch:
    """One epoch of this rank's shard as rows {column: tensor}: ``total`` rows over the shard
    (reader.epoch_order), reshuffled every epoch with ``generator`` (in order without)."""

    def __init__(self, tensors, total, generator):
        self.tensors, self.total, self.generator = tensors, total, generator
        self.rows = len(next(iter(tensors.values())))

    def __len__(self):
        return self.total

    def __iter__(self):
        permute = (lambda n: torch.randperm(n, generator=self.generator).numpy()) if self.generator else None
        for i in epoch_order(self.rows, self.total, permute).tolist():
            yield {name: t[i] for name, t in self.tensors.items()}


class ShardDataModule(pl.LightningDataModule):
    def __init__(self, store, train_path, val_path, columns, shapes, batch_size, val_batch_size, shuffle,
                 random_seed, train_steps_per_epoch, validation_steps_per_epoch, train_queue_size=None,
                 val_queue_size=None, verbose=False):
        super().__init__()
        self.store, self.train_path, self.val_path = store, train_path, val_path
        self.columns, self.shapes = list(columns), dict(shapes)
        self.batch_size, self.val_batch_size, self.shuffle = batch_size, val_batch_size, shuffle
        self.random_seed = random_seed
        self.train_steps, self.val_steps = train_steps_per_epoch, validation_steps_per_epoch
        self.train_queue_size, self.val_queue_size = train_queue_size, val_queue_size
        self.verbose = verbose

    def _loader(self, path, batch_size, shuffle, what, steps, queue_size):
        arrays = read_shard(self.store, path, self.columns, hvd.rank(), hvd.size())
        tensors = {}
        for column in self.columns:
            tensor = torch.from_numpy(arrays[column])
            shape = self.shapes.get(column)
            tensors[column] = tensor.view(-1, *shape) if shape else tensor
        rows = len(tensors[self.columns[0]])
        total = epoch_rows(hvd.allgather(torch.tensor([rows]), name='lightning_' + what + '_rows').tolist(), what)
        generator = (torch.Generator().manual_seed((self.random_seed or 0) + hvd.rank()) if shuffle else None)
        kwargs = dict(batch_size=batch_size, shuffling_queue_capacity=0, name=what,
                      limit_step_per_epoch=-1 if steps is None else max(steps, 0), verbose=self.verbose)
        epoch = _ShardEpoch(tensors, total, generator)
        if queue_size:
            return PytorchAsyncDataLoader(queue_size, epoch, **kwargs)
        return PytorchDataLoader(epoch, **kwargs)

    def train_dataloader(self):
        return self._loader(self.train_path, self.batch_size, self.shuffle, 'training', self.train_steps,
                            self.train_queue_size)

    def val_dataloader(self):
        if self.val_path is None:
            return []
        return self._loader(self.val_path, self.val_batch_size, False, 'validation', self.val_steps,
                            self.val_queue_size)
