"""horovod.torch on CUDA tensors: every collective, then a training step (run_on_device.sh).

    horovodrun -np 2 python tests/gpu/torch_cuda_worker.py collectives [--device cuda]
    horovodrun -np 2 python tests/gpu/torch_cuda_worker.py train [--device cuda]

Each rank pins its GPU with torch.cuda.set_device(local_rank % device_count) (on one card, every
rank shares GPU 0). ``--device cpu`` runs the same checks on CPU tensors (how the script itself is
tested where there is no GPU). Prints "<mode>: ok (<n> checks)" on rank 0 and exits 0, or raises.
"""

import argparse
import os
import sys

import torch

import horovod.torch as hvd

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool]


def local_value(dtype, r, shape, device):
    base = torch.arange(int(torch.tensor(shape).prod())).reshape(shape) % 3
    if dtype == torch.bool:
        return ((base + r) % 2).to(torch.bool).to(device)
    return (base + r + 1).to(dtype).to(device)


def expected(dtype, op, shape, device, ranks):
    values = torch.stack([local_value(dtype, r, shape, 'cpu').to(torch.float64) for r in ranks])
    if dtype == torch.bool:
        out = values.amax(0) if op in (hvd.Sum, hvd.Max) else values.amin(0)
    elif op == hvd.Sum:
        out = values.sum(0)
    elif op == hvd.Min:
        out = values.amin(0)
    elif op == hvd.Max:
        out = values.amax(0)
    else:
        out = values.prod(0)
    return out.to(dtype).to(device)


class Checks:
    def __init__(self):
        self.n = 0

    def equal(self, got, want, what):
        assert got.device == want.device, '%s: result on %s, expected %s' % (
            what, got.device, want.device)
        assert got.dtype == want.dtype, '%s: dtype %s, expected %s' % (what, got.dtype, want.dtype)
        if not torch.equal(got.cpu(), want.cpu()):
            raise AssertionError('%s: got %s, expected %s' % (what, got.cpu(), want.cpu()))
        self.n += 1


def collectives(device):
    c = Checks()
    r, n = hvd.rank(), hvd.size()
    ranks = list(range(n))
    side = torch.cuda.Stream() if device.type == 'cuda' else None
    nccl = os.environ.get('HOROVOD_GPU_OPERATIONS') == 'nccl' and device.type == 'cuda'
    for dtype in DTYPES:
        ops = [hvd.Sum, hvd.Min, hvd.Max] + ([hvd.Product] if dtype != torch.bool else [])
        for op in ops:
            x = local_value(dtype, r, (5, 3), device)
            if nccl and dtype == torch.int16:  # NCCL has no 16-bit integers: Horovod's error
                try:
                    hvd.allreduce(x, op=op, name='t.ar.%s.%d' % (dtype, op))
                except hvd.HorovodInternalError as e:
                    assert 'Type int16 is not supported in NCCL mode' in str(e), str(e)
                    c.n += 1
                    continue
                raise AssertionError('int16 allreduce through NCCL did not fail')
            c.equal(hvd.allreduce(x, op=op, name='t.ar.%s.%d' % (dtype, op)),
                    expected(dtype, op, (5, 3), device, ranks), 'allreduce %s op %d' % (dtype, op))
        y = local_value(dtype, r, (r + 1, 2), device)
        want = torch.cat([local_value(dtype, q, (q + 1, 2), device) for q in ranks])
        c.equal(hvd.allgather(y, name='t.ag.%s' % dtype), want, 'allgather %s' % dtype)
        z = local_value(dtype, r, (4,), device)
        hvd.broadcast_(z, root_rank=n - 1, name='t.bc.%s' % dtype)
        c.equal(z, local_value(dtype, n - 1, (4,), device), 'broadcast %s' % dtype)
    # Average, scaling, in place, on a side stream (the producer stream the core orders after).
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = local_value(dtype, r, (64,), device)
        if side is not None:
            with torch.cuda.stream(side):
                x = x * 1  # produced on the side stream
                hvd.allreduce_(x, op=hvd.Average, prescale_factor=0.5, postscale_factor=4.0,
                               name='t.avg.%s' % dtype)
            torch.cuda.current_stream().wait_stream(side)
        else:
            hvd.allreduce_(x, op=hvd.Average, prescale_factor=0.5, postscale_factor=4.0,
                           name='t.avg.%s' % dtype)
        want = (expected(torch.float64, hvd.Sum, (64,), device, ranks) * 2.0 / n).to(dtype)
        assert torch.allclose(x.double(), want.double(), rtol=1e-2), 'average %s' % dtype
        c.n += 1
    # Many small tensors at once (fusion), grouped allreduce.
    xs = [local_value(torch.float32, r, (10 + i,), device) for i in range(20)]
    handles = [hvd.allreduce_async_(x, op=hvd.Sum, name='t.fuse.%d' % i) for i, x in enumerate(xs)]
    for i, h in enumerate(handles):
        c.equal(hvd.synchronize(h), expected(torch.float32, hvd.Sum, (10 + i,), device, ranks),
                'fused allreduce %d' % i)
    outs = hvd.grouped_allreduce([local_value(torch.float32, r, (3 + i,), device)
                                  for i in range(4)], op=hvd.Sum, name='t.grouped')
    for i, o in enumerate(outs):
        c.equal(o, expected(torch.float32, hvd.Sum, (3 + i,), device, ranks), 'grouped %d' % i)
    # Alltoall with splits, reducescatter, process set.
    rows = torch.cat([torch.full((q + 1, 2), float(r * 10 + q), device=device) for q in ranks])
    out, received = hvd.alltoall(rows, splits=torch.tensor([q + 1 for q in ranks],
                                                           dtype=torch.int32), name='t.a2a')
    want = torch.cat([torch.full((r + 1, 2), float(s * 10 + r), device=device) for s in ranks])
    c.equal(out, want, 'alltoall')
    assert received.tolist() == [r + 1] * n
    big = local_value(torch.float32, r, (2 * n + 1, 3), device)
    got = hvd.reducescatter(big, op=hvd.Sum, name='t.rs')
    full = expected(torch.float32, hvd.Sum, (2 * n + 1, 3), device, ranks)
    rows_of = [(2 * n + 1) // n + (1 if q < (2 * n + 1) % n else 0) for q in ranks]
    start = sum(rows_of[:r])
    c.equal(got, full[start:start + rows_of[r]], 'reducescatter')
    members = [0, n - 1] if n >= 3 else [0]  # a set other than the global one
    if n >= 2:
        ps = hvd.add_process_set(members)
        if r in members:
            c.equal(hvd.allreduce(local_value(torch.float32, r, (6,), device), op=hvd.Sum,
                                  name='t.ps', process_set=ps),
                    expected(torch.float32, hvd.Sum, (6,), device, members), 'process set')
        hvd.remove_process_set(ps)
    if device.type == 'cuda':
        # The device-wide order of TensorFlow's GPU kernels (stream=-1 through the core): the input
        # is written on a side stream nobody tells Horovod about, and the GPU is synchronized first.
        from horovod import _core
        with torch.cuda.stream(side):
            w = torch.full((1 << 22,), float(r + 1), device=device)
        _core.allreduce_async(torch.utils.dlpack.to_dlpack(w), None, 't.devicewide', hvd.Sum, 1.0,
                              1.0, 0, stream=-1).wait()
        c.equal(w, torch.full_like(w, float(sum(q + 1 for q in ranks))), 'device-wide allreduce')
    # Large: several staging chunks and more than the fusion buffer.
    large = torch.full((48 << 20,), float(r + 1), device=device)
    hvd.allreduce_(large, op=hvd.Sum, name='t.large')
    c.equal(large, torch.full_like(large, float(sum(q + 1 for q in ranks))), 'large allreduce')
    return c.n


def train(device):
    torch.manual_seed(1234 + hvd.rank())  # different initial weights: broadcast must fix them
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    gen = torch.Generator().manual_seed(99 + hvd.rank())  # different data per rank
    x = torch.randn(64, 32, generator=gen).to(device)
    y = x[:, :4].argmax(1)  # a learnable rule, the same on every rank
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    checks = 0
    for name, p in model.named_parameters():
        assert p.device == device, name
        gathered = hvd.allgather(p.detach().reshape(1, -1), name='t.check.' + name)
        assert torch.equal(gathered[0], gathered[-1]), 'ranks diverged on ' + name
        checks += 1
    assert losses[-1] < losses[0], 'loss did not go down: %s' % losses
    return checks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('mode', choices=['collectives', 'train'])
    parser.add_argument('--device', default='cuda')
    args = parser.parse_args()
    os.environ['HOROVOD_DYNAMIC_PROCESS_SETS'] = '1'
    hvd.init()
    if args.device == 'cuda':
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        device = torch.device('cuda', torch.cuda.current_device())
    else:
        device = torch.device('cpu')
    n = collectives(device) if args.mode == 'collectives' else train(device)
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()
    if rank == 0:
        print('%s: ok (%d checks on %s, %d ranks)' % (args.mode, n, device, size), flush=True)
    return 0

if __name__ == '__main__':
    sys.exit(main())
