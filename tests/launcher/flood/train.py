"""A job that trains while its listeners are flooded (tests/launcher/test_flood.py).

Each rank writes, under FLOOD_DIR, `addr<R>` (the rendezvous server's "host port", from the
environment horovodrun gave it) once initialized, then runs allreduces (the liveness watch meanwhile
uses the rendezvous store four times a second) until the file `go` has appeared and
FLOOD_STEPS more steps have run (every rank stops at the same step), then writes `done<R>` with
its step count and the sum it checked, and shuts down.
"""
import os
import time

import torch

import horovod.torch as hvd

out = os.environ['FLOOD_DIR']
steps_after_go = int(os.environ.get('FLOOD_STEPS', '100'))
hvd.init()
rank, size = hvd.rank(), hvd.size()
with open(os.path.join(out, 'addr{}'.format(rank)), 'w') as f:
    f.write('{} {}'.format(os.environ.get('HOROVOD_GLOO_RENDEZVOUS_ADDR', ''),
                           os.environ.get('HOROVOD_GLOO_RENDEZVOUS_PORT', '')))
step = 0
go_step = None
deadline = time.time() + 120  # a missing `go` must not hang the job: the test then fails on `done`
while True:
    x = torch.full((1024,), float(rank + 1))
    y = hvd.allreduce(x, op=hvd.Sum, name='flood.{}'.format(step % 4))
    expected = size * (size + 1) / 2
    assert float(y[0]) == expected and float(y[-1]) == expected, (step, float(y[0]))
    step += 1
    if step % 10 == 0:
        seen = torch.tensor([1 if os.path.exists(os.path.join(out, 'go')) or time.time() > deadline else 0])
        if go_step is None and int(hvd.broadcast(seen, root_rank=0, name='flood.go').item()):
            go_step = step
        if go_step is not None and step >= go_step + steps_after_go:
            break
    time.sleep(0.005)
with open(os.path.join(out, 'done{}'.format(rank)), 'w') as f:
    f.write('{} {}'.format(step, go_step))
hvd.shutdown()
