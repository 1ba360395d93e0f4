"""An elastic torch training loop for the elastic launcher tests (tests/launcher/test_elastic.py).

Each epoch trains a few deterministic batches, then appends one JSON line to $ELASTIC_LOG:
epoch, rank, size, the rendezvous round, host, pid and a checksum of the weights; then commits.
$ELASTIC_SCHEDULE (JSON list) injects events, each at most once per job (marker files next to
the log): {"epoch": E, "rank": R, "do": "raise" | "exit" | "kill" | "stop" | "hang"} makes rank R fail
(or pause, or sleep for an hour) at the end of epoch E, before its commit;
{"epoch": E, "rank": R, "do": "hosts", "hosts": "h:2 ..."} makes rank R rewrite the discovery
file ($ELASTIC_HOSTS) and wait until the driver has announced the change, so that epoch E's
commit raises HostsUpdatedInterrupt on every rank.
"""

import json
import os
import signal
import sys
import time

import torch

import horovod.torch as hvd
from horovod import _core

LOG = os.environ['ELASTIC_LOG']
EPOCHS = int(os.environ.get('ELASTIC_EPOCHS', '6'))
SCHEDULE = json.loads(os.environ.get('ELASTIC_SCHEDULE', '[]'))
SLEEP = float(os.environ.get('ELASTIC_SLEEP', '0.2'))


def fire_once(index):
    marker = '{}.event{}'.format(LOG, index)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def run_events(epoch):
    for i, event in enumerate(SCHEDULE):
        if event['epoch'] != epoch or event['rank'] != hvd.rank() or not fire_once(i):
            continue
        what = event['do']
        print('event: {} at {:.3f}'.format(what, time.time()), flush=True)
        if what == 'raise':
            raise RuntimeError('injected failure at epoch {}'.format(epoch))
        if what == 'exit':
            os._exit(3)
        if what == 'kill':
            os.kill(os.getpid(), signal.SIGKILL)
        if what == 'stop':
            os.kill(os.getpid(), signal.SIGSTOP)
        if what == 'hang':
            time.sleep(3600)
        if what == 'hosts':
            with open(os.environ['ELASTIC_HOSTS'] + '.tmp', 'w') as f:
                f.write(event['hosts'].replace(' ', '\n') + '\n')
            os.replace(os.environ['ELASTIC_HOSTS'] + '.tmp', os.environ['ELASTIC_HOSTS'])
            deadline = time.time() + 30
            while _core.elastic_host_updates()[2] == 0:
                assert time.time() < deadline, 'the driver did not announce the host change'
                time.sleep(0.05)


def main():
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    state.register_reset_callbacks([lambda: print('reset: rank {} of {} at {:.3f}'.format(
        hvd.rank(), hvd.size(), time.time()), flush=True)])

    @hvd.elastic.run
    def train(state):
        while state.epoch < EPOCHS:
            for batch in range(3):
                g = torch.Generator().manual_seed(1000 * state.epoch + 10 * batch + hvd.rank())
                x = torch.randn(16, 8, generator=g)
                loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            run_events(state.epoch)
            record = dict(epoch=state.epoch, rank=hvd.rank(), size=hvd.size(),
                          round=_core.elastic_host_updates()[0], host=os.environ['HOROVOD_HOSTNAME'],
                          pid=os.getpid(), weights=model.weight.detach().double().sum().item(), time=time.time())
            with open(LOG, 'a') as f:
                f.write(json.dumps(record) + '\n')
            state.epoch += 1
            state.commit()
            time.sleep(SLEEP)

    train(state)
    print('done: rank {} of {}'.format(hvd.rank(), hvd.size()), flush=True)


if __name__ == '__main__':
    sys.exit(main())
