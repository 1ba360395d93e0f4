"""One rank of the torch compression checks (test_compression.py starts it under horovodrun -np 2).

For no compression, PowerSGD rank 1 and 2 and the int8 quantizer: trains a small classifier on
this rank's shard of Gaussian blobs, checks that the weights are bitwise identical on every rank
(every CHECK_EVERY steps), and that the held-out accuracy reaches the target. Then, with PowerSGD: the
residuals and Q are in state_dict() and load_state_dict() puts them back; TorchState.restore()
brings back the committed residuals; broadcast_optimizer_state() gives every rank root's Q
and keeps each rank's residual. Prints ``OK <check>`` per passed check.
"""

import sys

import torch
import torch.nn as nn

import horovod.torch as hvd

from common import check_training, ok

STEPS = 60
CHECK_EVERY = 15  # steps between the cross-rank weight comparisons (and after the last)


def blobs(n, seed):
    g = torch.Generator().manual_seed(1234)
    centers = torch.randn(8, 32, generator=g) * 0.8
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 8, (n,), generator=g)
    return centers[labels] + torch.randn(n, 32, generator=g), labels


def make_model():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 8))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def same_on_every_rank(model):
    gathered = hvd.allgather(flat(model).unsqueeze(0), name='compression.check.weights')
    return all(torch.equal(gathered[0], gathered[i]) for i in range(1, gathered.shape[0]))


def train(compression, steps=STEPS, model=None, opt=None):
    model = model or make_model()
    if opt is None:
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                       named_parameters=model.named_parameters(),
                                       compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = blobs(64 * steps, seed=100 + hvd.rank())
    for step in range(steps):
        xb, yb = x[64 * step:64 * (step + 1)], y[64 * step:64 * (step + 1)]
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
        if (step + 1) % CHECK_EVERY and step + 1 < steps:
            continue
        assert same_on_every_rank(model), '%r: weights differ across ranks after step %d' % (
            compression, step)
    xt, yt = blobs(2000, seed=99)
    with torch.no_grad():
        accuracy = (model(xt).argmax(1) == yt).float().mean().item()
    return model, opt, accuracy



def residuals(opt):
    state = opt.state_dict()['horovod_compression']
    return {n: s['residual'].clone() for n, s in state.items() if 'residual' in s}


def check_state_dict():
    model, opt, _ = train(hvd.PowerSGD(rank=2), steps=10)
    saved = opt.state_dict()
    state = saved['horovod_compression']
    assert set(state) == {'0.weight', '2.weight', '4.weight', '__step__'}, sorted(state)
    assert int(state['__step__']['step']) == 10, state['__step__']
    assert state['0.weight']['residual'].abs().sum() > 0
    kept = {n: {s: t.clone() for s, t in slots.items()} for n, slots in state.items()}
    train(None, steps=3, model=model, opt=opt)  # moves residuals and Q on
    assert not torch.equal(residuals(opt)['0.weight'], kept['0.weight']['residual'])
    opt.load_state_dict(dict(saved, horovod_compression=kept))
    for n, slots in opt.state_dict()['horovod_compression'].items():
        for s, t in slots.items():
            assert torch.equal(t, kept[n][s]), (n, s)
    ok('torch_state_dict')

    # A fresh optimizer (no state yet) loads it too.
    model2 = make_model()
    opt2 = hvd.DistributedOptimizer(torch.optim.SGD(model2.parameters(), lr=0.05),
                                    named_parameters=model2.named_parameters(),
                                    compression=hvd.PowerSGD(rank=2))
    opt2.load_state_dict(dict(saved, horovod_compression=kept))
    assert torch.equal(residuals(opt2)['2.weight'], kept['2.weight']['residual'])
    ok('torch_state_dict_fresh_optimizer')


def check_elastic_restore():
    model, opt, _ = train(hvd.PowerSGD(rank=1), steps=5)
    state = hvd.elastic.TorchState(model, opt, epoch=0)
    state.commit()
    committed = residuals(opt)
    train(None, steps=3, model=model, opt=opt)
    assert not torch.equal(residuals(opt)['0.weight'], committed['0.weight'])
    state.restore()
    after = residuals(opt)
    assert all(torch.equal(after[n], committed[n]) for n in committed)
    ok('torch_elastic_restore')

    # sync: Q (and the step) from rank 0, residuals each rank's own.
    comp = opt._ef
    q = comp._slots[model[0].weight]['q']
    q.add_(float(hvd.rank()))
    mine = residuals(opt)
    state.sync()
    gathered = hvd.allgather(q.unsqueeze(0), name='compression.check.q')
    assert torch.equal(gathered[0], gathered[1])
    assert all(torch.equal(residuals(opt)[n], mine[n]) for n in mine)
    ok('torch_elastic_sync')


def check_refusals():
    model = make_model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for kwargs, text in [(dict(op=hvd.Adasum), 'op must be Average or Sum'),
                         (dict(gradient_predivide_factor=2.0), 'gradient_predivide_factor'),
                         (dict(groups=2), 'groups')]:
        try:
            hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters(),
                                     compression=hvd.PowerSGD(), **kwargs)
        except ValueError as e:
            assert text in str(e), e
        else:
            raise AssertionError('accepted %r' % kwargs)
    try:
        hvd.allreduce(torch.ones(3), compression=hvd.PowerSGD())
    except TypeError as e:
        assert 'DistributedOptimizer' in str(e)
    else:
        raise AssertionError('allreduce accepted PowerSGD')
    ok('torch_refusals')


def main():
    hvd.init()
    assert hvd.size() == 2, hvd.size()
    check_training(hvd, train, 'torch_train_')
    check_state_dict()
    check_elastic_restore()
    check_refusals()
    sys.stdout.write('DONE\n')


if __name__ == '__main__':
    main()
