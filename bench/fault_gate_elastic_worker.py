"""One worker of an elastic fault-gate run (bench/fault_gate.py --kind elastic, under horovodrun
--min-np). A small torch model trains GATE_STEPS steps inside hvd.elastic.run, committing every
GATE_COMMIT_EVERY steps. Files under GATE_DIR:

  ready<R>        pid, written once after warm-up by the first round's rank R (whom to hit)
  commit<S>.<R>.json  rank R's hash of the state it committed at step S
  entry.<pid>.<n> each entry into the training function: round, rank, size, step, hash of the
                  state it starts from (after restore and sync), wall time
  done<R>.json    the final round's rank R finished: steps, round, size, hash

Determinism: data depends on (step, rank) only, and the engine's reductions are rank-ordered, so
a rank that resumes from commit S holds exactly the committed bytes: the gate compares hashes.
"""

import hashlib
import json
import os
import time

import torch

import horovod.torch as hvd
from horovod import _core

out = os.environ['GATE_DIR']
steps = int(os.environ.get('GATE_STEPS', '200'))
commit_every = int(os.environ.get('GATE_COMMIT_EVERY', '10'))
warmup = int(os.environ.get('GATE_WARMUP_STEPS', '30'))
pause = float(os.environ.get('GATE_STEP_SLEEP', '0.01'))


def write(name, payload):
    path = os.path.join(out, name)
    with open(path + '.tmp', 'w') as f:
        json.dump(payload, f)
    os.replace(path + '.tmp', path)


def digest(model):
    h = hashlib.sha256()
    for _, t in sorted(model.state_dict().items()):
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, step=0)
entries = [0]
role = os.environ.get('GATE_ROLE_{}'.format(hvd.rank()), '')
first_round_rank = hvd.rank()


@hvd.elastic.run
def train(state):
    entries[0] += 1
    write('entry.{}.{}'.format(os.getpid(), entries[0]),
          dict(round=_core.elastic_host_updates()[0], rank=hvd.rank(), size=hvd.size(), step=state.step,
               hash=digest(model), t=time.time()))
    while state.step < steps:
        g = torch.Generator().manual_seed(1000003 * state.step + hvd.rank())
        x = torch.randn(32, 16, generator=g)
        loss = (model(x) - x[:, :1]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state.step += 1
        if state.step == warmup and entries[0] == 1 and _core.elastic_host_updates()[0] == 0:
            with open(os.path.join(out, 'ready{}'.format(first_round_rank)), 'w') as f:
                f.write(str(os.getpid()))
        if role == 'slow' and state.step > warmup:
            time.sleep(4 * pause)
        if role == 'leave' and state.step == warmup + 20:
            write('left{}.json'.format(first_round_rank), dict(t=time.time(), step=state.step))
            hvd.shutdown()
            os._exit(0)
        if state.step % commit_every == 0:
            # state.commit(), with the saved state's hash recorded between its two halves.
            state.save()
            write('commit{}.{}.json'.format(state.step, hvd.rank()), dict(hash=digest(model)))
            state.check_host_updates()
        time.sleep(pause)


train(state)
write('done{}.json'.format(hvd.rank()), dict(steps=state.step, round=_core.elastic_host_updates()[0],
                                             size=hvd.size(), hash=digest(model)))
