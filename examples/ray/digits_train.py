"""The training function shared by the Ray and Spark examples: a small MLP on scikit-learn's
bundled digits set (1,797 8x8 images, no download), trained with horovod.torch. Every Horovod
process calls ``train(config)``; rank 0's return value carries the test accuracy."""


def train(config):
    """config: lr, epochs, batch_size (per rank), hidden, seed. Returns a dict with
    'test_accuracy' and 'loss' (last epoch's training loss averaged over ranks)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import horovod.torch as hvd

    hvd.init()
    torch.manual_seed(config.get('seed', 0))
    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split((x / 16.0).astype(np.float32), y, test_size=0.25,
                                                        random_state=0)
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    # Each rank trains on its own shard of every epoch's permutation.
    model = torch.nn.Sequential(torch.nn.Linear(64, config.get('hidden', 64)), torch.nn.ReLU(),
                                torch.nn.Linear(config.get('hidden', 64), 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=config['lr'] * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    batch = config.get('batch_size', 32)
    generator = torch.Generator().manual_seed(config.get('seed', 0))
    loss_avg = float('nan')
    for epoch in range(config['epochs']):
        order = torch.randperm(len(x_train), generator=generator)[hvd.rank()::hvd.size()]
        steps = len(order) // batch
        total = 0.0
        for step in range(steps):
            idx = order[step * batch:(step + 1) * batch]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            total += loss.item()
        loss_avg = hvd.allreduce(torch.tensor(total / max(steps, 1)), name='epoch_loss').item()
        if hvd.rank() == 0 and config.get('verbose', True):
            print('epoch {}: training loss {:.4f}'.format(epoch, loss_avg), flush=True)
    with torch.no_grad():
        predicted = model(torch.from_numpy(x_test)).argmax(1).numpy()
    accuracy = float((predicted == y_test).mean())
    return {'test_accuracy': accuracy, 'loss': loss_avg}
