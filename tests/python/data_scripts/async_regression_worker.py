"""Run under ``horovodrun -np N`` by test_data_loader.py: a user-style subclassed async data
loader (AsyncDataLoaderMixin first in the bases) feeds a linear regression trained with
hvd.DistributedOptimizer; every rank checks that it converged and that the ranks agree."""

import threading

import torch

import horovod.torch as hvd
from horovod.data import AsyncDataLoaderMixin, BaseDataLoader

TRUE_W = torch.tensor([[2.0], [-3.0], [0.5]])
TRUE_B = 1.25


class ShardLoader(BaseDataLoader):
    """This rank's shard of (x, y) as batches; _process_batch adds a leading feature check."""

    def __init__(self, x, y, batch_size):
        self.x, self.y, self.batch_size = x, y, batch_size
        self.processed = 0

    def __len__(self):
        return (len(self.x) + self.batch_size - 1) // self.batch_size

    def _iterate(self):
        order = torch.randperm(len(self.x))
        for start in range(0, len(self.x), self.batch_size):
            idx = order[start:start + self.batch_size]
            yield {'x': self.x[idx], 'y': self.y[idx]}

    def _process_batch(self, batch):
        self.processed += 1
        return batch['x'], batch['y']


class AsyncShardLoader(AsyncDataLoaderMixin, ShardLoader):
    pass


def main():
    hvd.init()
    torch.manual_seed(1000 + hvd.rank())
    x = torch.randn(512, 3)
    y = x @ TRUE_W + TRUE_B + 0.01 * torch.randn(512, 1)
    loader = AsyncShardLoader(async_loader_queue_size=4, x=x, y=y, batch_size=32)
    assert loader.async_loader_queue_size == 4 and len(loader) == 16

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    for epoch in range(8):
        seen = 0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            seen += 1
        assert seen == 16, seen
    assert loader.processed == 8 * 16
    loader.close_async_loader()
    assert [t for t in threading.enumerate() if t.name.startswith('horovod-async-loader')] == []

    with torch.no_grad():
        final = torch.nn.functional.mse_loss(model(x), y).item()
    weights = torch.cat([model.weight.view(-1), model.bias.view(-1)])
    gathered = hvd.allgather(weights.view(1, -1), name='weights')
    assert torch.equal(gathered[0], gathered[-1]), gathered
    assert final < 1e-2, final
    assert torch.allclose(model.weight.view(-1, 1), TRUE_W, atol=0.05), model.weight
    assert abs(model.bias.item() - TRUE_B) < 0.05, model.bias
    print('rank {} converged: mse {:.5f}'.format(hvd.rank(), final), flush=True)


if __name__ == '__main__':
    main()
