"""ElasticSampler: a distributed sampler that can resume mid-epoch with a different world."""

import math
import random

import torch.utils.data.sampler

from horovod.torch.async_ops import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Sampler that partitions the dataset across ranks and skips the samples already processed
    this epoch (``record_batch``), so that after a reset the remaining samples are re-divided
    among the current workers.

    Args:
        dataset: Dataset used for sampling (needs ``len``).
        shuffle: If True (default), shuffle the indices (``random.Random(seed + epoch)``).
        seed: Random seed used to shuffle the sampler when ``shuffle=True``; must be identical
            on all ranks.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed

        self.epoch = 0
        self.processed_num = 0

        self.reset()

    def set_epoch(self, epoch):
        """Sets the epoch, clears the processed count and re-partitions. Call at the end of
        each epoch."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that a batch was processed (by every rank)."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict['epoch']
        self.processed_num = state_dict['processed_num']
        self.reset()

    def reset(self):
        """Re-reads rank and size and recomputes this rank's share."""
        self.num_replicas = size()
        self.rank = rank()

        # Exclude any samples already processed this epoch.
        all_indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(all_indices)
        self.remaining_indices = all_indices[self.processed_num:]

        # Pad to a multiple of the number of replicas.
        self.num_samples = int(math.ceil(len(self.remaining_indices) * 1.0 / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        self.indices = self.remaining_indices[:]
        # Add extra samples (from the start) to make it evenly divisible.
        self.indices += self.indices[:(self.total_size - len(self.indices))]
        assert len(self.indices) == self.total_size

        # This rank's share.
        self.indices = self.indices[self.rank:self.total_size:self.num_replicas]
        assert len(self.indices) == self.num_samples

        return iter(self.indices)

    def __len__(self):
        return self.num_samples
