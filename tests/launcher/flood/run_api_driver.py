"""horovod.run() under a flood of its task service (tests/launcher/test_flood.py).

    python run_api_driver.py DIR

Prints "task service port N" as soon as the task service listens, waits (at most 120 s) for the
file DIR/go, then runs a 2-rank job whose function allreduces once and returns the size, and
prints "results: [...]".
"""
import os
import sys
import time

import horovod.runner as runner

out = sys.argv[1]
_TaskService = runner.TaskService


def announced_task_service(*args, **kwargs):
    service = _TaskService(*args, **kwargs)
    print('task service port {}'.format(service.port), flush=True)
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(out, 'go')) and time.time() < deadline:
        time.sleep(0.05)
    return service


def train():
    import torch

    import horovod.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.ones(4), op=hvd.Sum, name='flood.run')
    size = hvd.size()
    hvd.shutdown()
    return int(total[0]) if int(total[0]) == size else -1


runner.TaskService = announced_task_service
print('results: {}'.format(runner.run(train, np=2)), flush=True)
