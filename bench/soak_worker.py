"""One rank of a soak run (bench/soak.py, under horovodrun): a small torch MLP trains until the
deadline SOAK_DEADLINE (epoch seconds) passes, at most SOAK_STEP_RATE steps a second.

Files under SOAK_DIR:
  pid<R>        this rank's pid (written after hvd.init(), so the sampler knows whom to watch)
  steps<R>      "<steps> <epoch seconds>", rewritten every 50 steps (progress, for the report)
  done<R>.json  the rank finished: steps, seconds, final loss

Every rank stops at the same step: every 20 steps rank 0's decision to stop is broadcast.
"""

import json
import os
import time

import torch

import horovod.torch as hvd

out = os.environ['SOAK_DIR']
deadline = float(os.environ['SOAK_DEADLINE'])
step_rate = float(os.environ.get('SOAK_STEP_RATE', '20'))


def write(name, text):
    path = os.path.join(out, name)
    with open(path + '.tmp', 'w') as f:
        f.write(text)
    os.replace(path + '.tmp', path)


hvd.init()
torch.set_num_threads(1)
rank = hvd.rank()
write('pid{}'.format(rank), str(os.getpid()))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
start = time.time()
step = 0
loss = torch.tensor(0.0)
while True:
    g = torch.Generator().manual_seed(1000003 * step + rank)
    x = torch.randn(32, 64, generator=g)
    y = torch.randint(0, 10, (32,), generator=g)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    step += 1
    if step % 50 == 0:
        write('steps{}'.format(rank), '{} {:.3f}'.format(step, time.time()))
    if step % 20 == 0:
        stop = torch.tensor([1 if time.time() >= deadline else 0], dtype=torch.int32)
        if int(hvd.broadcast(stop, root_rank=0, name='soak.stop').item()):
            break
    pause = start + step / step_rate - time.time()
    if pause > 0:
        time.sleep(pause)

seconds = time.time() - start
write('done{}.json'.format(rank), json.dumps(dict(steps=step, seconds=seconds, loss=float(loss))))
hvd.shutdown()
