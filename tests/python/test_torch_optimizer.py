"""DistributedOptimizer, optimizer-state broadcast, torch.compile and elastic state, under the
launcher (every rank runs every test):

    horovodrun -np 2 python -m pytest -x tests/python/test_torch_optimizer.py
"""

import copy
import warnings

import pytest

torch = pytest.importorskip('torch')

import horovod.torch as hvd  # noqa: E402
from horovod.common.elastic import notification_manager, HostUpdateResult  # noqa: E402
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: E402

torch.set_num_threads(1)
F = torch.nn.functional


@pytest.fixture(scope='module', autouse=True)
def horovod():
    hvd.init(process_sets='dynamic')
    yield
    hvd.shutdown()


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def hooked_sgd(model, **kwargs):
    """A DistributedOptimizer over SGD for `model`; skips the test on 1 rank, where no hooks are
    installed."""
    if hvd.size() == 1:
        pytest.skip('hooks are installed only with 2+ ranks')
    return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters(), **kwargs)


def shard(seed, rank, batch=8):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randn(batch, 6, generator=g), torch.randint(0, 3, (batch,), generator=g)


def reference_grads(model, seeds_per_rank):
    """Average over ranks of each rank's summed micro-batch gradients, computed locally."""
    grads = [torch.zeros_like(p) for p in model.parameters()]
    n = hvd.size()
    for r in range(n):
        model.zero_grad()
        for seed in seeds_per_rank:
            x, y = shard(seed, r)
            F.cross_entropy(model(x), y).backward()
        for g, p in zip(grads, model.parameters()):
            g += p.grad / n
    model.zero_grad()
    return grads


@pytest.mark.parametrize('passes', [1, 2])
def test_gradients_are_averaged(passes):
    model = make_model()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        seeds = [10 * step + k for k in range(passes)]
        opt.zero_grad()
        for seed in seeds:
            x, y = shard(seed, hvd.rank())
            F.cross_entropy(model(x), y).backward()
        opt.step()
        for g, p in zip(reference_grads(ref, seeds), ref.parameters()):
            p.grad = g
        ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_too_many_backward_passes():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = shard(1, hvd.rank())
    F.cross_entropy(model(x), y).backward()
    if hvd.size() > 1:
        with pytest.raises(AssertionError, match='more than backward_passes_per_step'):
            F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.set_backward_passes_per_step(2)
    for _ in range(2):
        F.cross_entropy(model(x), y).backward()
    opt.step()


def test_zero_grad_with_pending_allreduces():
    model = make_model()
    opt = hooked_sgd(model)
    x, y = shard(2, hvd.rank())
    F.cross_entropy(model(x), y).backward()
    with pytest.raises(AssertionError, match='optimizer.zero_grad\\(\\) was called after'):
        opt.zero_grad()
    opt.step()
    opt.zero_grad()


def test_synchronize_clip_skip_synchronize_and_warning():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = shard(3, hvd.rank())
    F.cross_entropy(model(x), y).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    with opt.skip_synchronize():
        opt.step()
    F.cross_entropy(model(x), y).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        opt.step()
    messages = [str(w.message) for w in caught
                if 'optimizer.step() called without optimizer.skip_synchronize()' in
                str(w.message)]
    assert len(messages) == 1


def test_compression_fp16_and_predivide():
    model = make_model()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16,
                                   gradient_predivide_factor=2.0)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x, y = shard(4, hvd.rank())
    F.cross_entropy(model(x), y).backward()
    opt.step()
    for g, p in zip(reference_grads(ref, [4]), ref.parameters()):
        p.grad = g
    ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.dtype == torch.float32
        assert torch.allclose(p, q, atol=1e-3)
    with pytest.raises(ValueError, match='gradient_predivide_factor not supported with op'):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 gradient_predivide_factor=2.0, op=hvd.Sum)


@pytest.mark.parametrize('groups', [2, 'list'])
def test_groups(groups):
    model = make_model()
    ref = copy.deepcopy(model)
    params = list(model.parameters())
    group_arg = [[params[0], params[2]]] if groups == 'list' else groups
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), groups=group_arg)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):  # the first step grouped, then one bucket per group
        opt.zero_grad()
        x, y = shard(5 + step, hvd.rank())
        F.cross_entropy(model(x), y).backward()
        opt.step()
        for g, p in zip(reference_grads(ref, [5 + step]), ref.parameters()):
            p.grad = g
        ref_opt.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p, q, atol=1e-6)
    if hvd.size() > 1:
        assert len(opt._buckets) == (2 if groups == 2 else 3)


def test_num_groups_is_deprecated():
    model = make_model()
    with pytest.warns(DeprecationWarning):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters(), num_groups=2)


def test_parameters_unused_on_some_ranks():
    for opt_cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.RMSprop, torch.optim.Adagrad):
        model = make_model()
        opt = hvd.DistributedOptimizer(opt_cls(model.parameters(), lr=0.01),
                                       named_parameters=model.named_parameters())
        x, _ = shard(6, hvd.rank())
        if hvd.rank() == 0:
            loss = model[0](x).sum()  # the second layer gets no gradient here
        else:
            loss = model(x).sum()
        loss.backward()
        opt.step()  # completes on every rank: missing gradients are reduced as zeros


def test_two_optimizers_on_disjoint_modules():
    a, b = make_model(1), make_model(2)
    opt_a = hvd.DistributedOptimizer(torch.optim.SGD(a.parameters(), lr=0.1),
                                     named_parameters=[('a.' + k, v)
                                                       for k, v in a.named_parameters()])
    opt_b = hvd.DistributedOptimizer(torch.optim.SGD(b.parameters(), lr=0.1),
                                     named_parameters=[('b.' + k, v)
                                                       for k, v in b.named_parameters()])
    x, y = shard(7, hvd.rank())
    for step in range(4):
        train_a = step % 2 == 0
        for p in a.parameters():
            p.requires_grad_(train_a)
        for p in b.parameters():
            p.requires_grad_(not train_a)
        model, opt = (a, opt_a) if train_a else (b, opt_b)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def test_named_parameters_validation():
    model = make_model()
    two = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
    with pytest.raises(ValueError, match='Parameter names in named_parameters must be unique'):
        hvd.DistributedOptimizer(torch.optim.SGD(two.parameters(), lr=0.1),
                                 named_parameters=[n for m in two for n in m.named_parameters()])
    with pytest.raises(ValueError, match='one or more model parameters were not named'):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=list(model.named_parameters())[:1])
    with pytest.raises(ValueError, match='backward_passes_per_step must be > 0'):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 backward_passes_per_step=0)


def test_unnamed_parameters_with_several_param_groups():
    model = make_model()
    opt = torch.optim.SGD([{'params': model[0].parameters()},
                           {'params': model[2].parameters(), 'lr': 0.01}], lr=0.1)
    opt = hvd.DistributedOptimizer(opt)
    assert type(opt).__name__ == 'SGD' and isinstance(opt, torch.optim.SGD)
    names = sorted(opt._parameter_names.values())
    assert len(set(names)) == 4
    assert hvd.allgather_object(names) == [names] * hvd.size()
    x, y = shard(8, hvd.rank())
    F.cross_entropy(model(x), y).backward()
    opt.step()
    assert opt.param_groups[1]['lr'] == 0.01


def test_process_set_optimizer():
    if hvd.size() == 1:
        pytest.skip('needs 2 ranks')
    evens = hvd.add_process_set([r for r in range(hvd.size()) if r % 2 == 0])
    try:
        model = make_model(seed=hvd.rank())  # different weights everywhere, no broadcast
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                       named_parameters=model.named_parameters(),
                                       process_set=evens)
        x, y = shard(9, hvd.rank())
        F.cross_entropy(model(x), y).backward()
        opt.step()
        grads = hvd.allgather(torch.cat([p.grad.view(-1) for p in model.parameters()])
                              .unsqueeze(0), name='ps_opt.grads')
        even_rows = [grads[r] for r in evens.ranks]
        for row in even_rows[1:]:
            assert torch.allclose(row, even_rows[0])
        if hvd.size() > 2:
            assert not torch.allclose(grads[1], grads[0])
    finally:
        hvd.remove_process_set(evens)
        # Only the set's members issued gradient allreduces, so the per-process counters behind
        # unnamed operations differ now: re-initialize to line them up again.
        hvd.barrier()
        hvd.shutdown()
        hvd.init(process_sets='dynamic')


def test_sparse_gradients():
    for sparse_as_dense in (False, True):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(20, 4, sparse=True)
        base = torch.optim.SparseAdam(emb.parameters(), lr=0.1) if not sparse_as_dense \
            else torch.optim.SGD(emb.parameters(), lr=0.1)
        opt = hvd.DistributedOptimizer(base, named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
        for step in range(2):
            idx = torch.tensor([hvd.rank(), 5 + step, 10 + hvd.rank()])
            opt.zero_grad()
            emb(idx).sum().backward()
            opt.step()
        weights = hvd.allgather(emb.weight.detach().unsqueeze(0))
        for r in range(1, hvd.size()):
            assert torch.allclose(weights[r], weights[0], atol=1e-6)


def test_adasum_optimizer_is_the_delta_optimizer():
    # Its results are checked in test_adasum.py (power-of-2 sizes); here the wrapper itself.
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
    assert type(opt).__name__ == 'SGD' and isinstance(opt, torch.optim.SGD)
    if hvd.size() > 1:
        with pytest.raises(AssertionError, match='Skipping synchronization is not supported'):
            with opt.skip_synchronize():
                pass


# ---- gradient buckets ----------------------------------------------------------------------------
# Buckets are built at the end of the first synchronize(); these tests run several steps so that
# the later ones go through them. A tiny cap makes several buckets out of the small model.

class MixedModel(torch.nn.Module):
    """float32 then bfloat16 layers: two bucket dtypes."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.a = torch.nn.Linear(6, 16)
        self.b = torch.nn.Linear(16, 16).to(torch.bfloat16)
        self.c = torch.nn.Linear(16, 3)

    def forward(self, x):
        h = torch.tanh(self.a(x)).to(torch.bfloat16)
        return self.c(torch.tanh(self.b(h)).float())


TINY_CAP_MB = 200 / 2 ** 20  # 200 bytes: a couple of parameters per bucket


def assert_bucketed(opt, model, buckets=None):
    assert opt._buckets, 'no buckets were built'
    if buckets is not None:
        assert len(opt._buckets) == buckets
    for p in model.parameters():
        bucket, view = opt._bucket_of[p]
        assert p.grad is view
        start = bucket.flat.data_ptr()
        assert start <= p.grad.data_ptr() < start + bucket.nbytes()


def assert_same(model, other, exact):
    for p, q in zip(model.parameters(), other.parameters()):
        if exact and p.dtype == torch.float32:
            assert torch.equal(p, q)
        else:
            tol = 1e-6 if p.dtype == torch.float32 else 2e-2
            assert torch.allclose(p.float(), q.float(), atol=tol, rtol=tol)


def manual_step(model, opt, seeds, clip=None):
    """The reference: local backward passes, one named allreduce per gradient, then the step."""
    opt.zero_grad()
    for seed in seeds:
        x, y = shard(seed, hvd.rank())
        F.cross_entropy(model(x), y).backward()
    for name, p in model.named_parameters():
        hvd.allreduce_(p.grad, name='manual.' + name)
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()


@pytest.mark.parametrize('opt_name,passes', [('SGD', 1), ('Adam', 1), ('SGD', 2)])
def test_buckets_match_per_gradient_path_and_manual(opt_name, passes):
    def make_opt(m):
        if opt_name == 'SGD':
            return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        return torch.optim.Adam(m.parameters(), lr=0.01)

    bucketed, plain, manual = MixedModel(), MixedModel(), MixedModel()
    opt_b = hvd.DistributedOptimizer(make_opt(bucketed), backward_passes_per_step=passes,
                                     named_parameters=[('b.' + k, v) for k, v in
                                                       bucketed.named_parameters()],
                                     bucket_cap_mb=TINY_CAP_MB)
    opt_p = hvd.DistributedOptimizer(make_opt(plain), backward_passes_per_step=passes,
                                     named_parameters=[('p.' + k, v) for k, v in
                                                       plain.named_parameters()],
                                     bucket_cap_mb=0)
    opt_m = make_opt(manual)
    for step in range(4):
        seeds = [20 * step + k for k in range(passes)]
        for model, opt in ((bucketed, opt_b), (plain, opt_p)):
            opt.zero_grad()
            for seed in seeds:
                x, y = shard(seed, hvd.rank())
                F.cross_entropy(model(x), y).backward()
            opt.step()
        manual_step(manual, opt_m, seeds)
        assert_same(bucketed, plain, exact=hvd.size() == 2)
        assert_same(bucketed, manual, exact=False)
    if hvd.size() > 1:
        assert_bucketed(opt_b, bucketed)
        # float32 and bfloat16 never share a bucket; the small cap makes several.
        assert {b.flat.dtype for b in opt_b._buckets} == {torch.float32, torch.bfloat16}
        assert len(opt_b._buckets) >= 3
        assert opt_p._buckets is None


def test_bucket_zero_grad_forms_and_unused_parameters():
    """optimizer.zero_grad() sets bucketed grads to None (the next backward's hooks copy the
    fresh gradients into their views) and zero_grad(set_to_none=False) zeroes the views in
    place; model.zero_grad() and a layer unused on rank 0 after it (its view still holds the last
    step's values) must not leak stale gradients into the average."""
    model, manual = make_model(), make_model()
    opt = hooked_sgd(model, bucket_cap_mb=TINY_CAP_MB)
    opt_m = torch.optim.SGD(manual.parameters(), lr=0.1)

    def loss_of(m, seed, partial):
        x, y = shard(seed, hvd.rank())
        return m[0](x).sum() if partial else F.cross_entropy(m(x), y)

    for step, (zero, partial) in enumerate([('opt', False), ('opt', False), ('model', False),
                                            ('model', True), ('opt', True), ('opt-keep', True),
                                            ('none', False)]):
        seed = 40 + step
        if zero == 'opt':
            opt.zero_grad()  # set_to_none=True by default
            if step > 0:
                assert all(p.grad is None for p in model.parameters())
        elif zero == 'opt-keep':
            opt.zero_grad(set_to_none=False)
            assert_bucketed(opt, model)
            assert all(torch.count_nonzero(p.grad) == 0 for p in model.parameters())
        elif zero == 'model':
            model.zero_grad()
            assert all(p.grad is None for p in model.parameters())
        partial_here = partial and hvd.rank() == 0
        loss_of(model, seed, partial_here).backward()
        opt.step()
        if step > 0:
            assert_bucketed(opt, model)

        if zero != 'none':
            opt_m.zero_grad()
        loss_of(manual, seed, partial_here).backward()
        for name, p in manual.named_parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            hvd.allreduce_(p.grad, name='manual.' + name)
        opt_m.step()
        for p, q in zip(model.parameters(), manual.parameters()):
            assert torch.allclose(p, q, atol=1e-6), step


def test_bucket_clipping_with_synchronize():
    model, manual = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    opt_m = torch.optim.SGD(manual.parameters(), lr=0.5)
    for step in range(3):
        opt.zero_grad()
        x, y = shard(60 + step, hvd.rank())
        F.cross_entropy(model(x), y).backward()
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        with opt.skip_synchronize():
            opt.step()
        manual_step(manual, opt_m, [60 + step], clip=0.05)
        for p, q in zip(model.parameters(), manual.parameters()):
            assert torch.allclose(p, q, atol=1e-6), step
    if hvd.size() > 1:
        assert_bucketed(opt, model, buckets=1)  # the default cap holds the whole model


def test_bucket_errors_too_many_passes_and_early_zero_grad():
    model = make_model()
    opt = hooked_sgd(model)
    x, y = shard(1, hvd.rank())
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    assert_bucketed(opt, model)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    with pytest.raises(AssertionError, match='more than backward_passes_per_step'):
        F.cross_entropy(model(x), y).backward()
    with pytest.raises(AssertionError, match='optimizer.zero_grad\\(\\) was called after'):
        opt.zero_grad()
    opt.step()
    opt.set_backward_passes_per_step(2)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    with pytest.raises(AssertionError, match='optimizer.zero_grad\\(\\) was called after'):
        opt.zero_grad()  # half-way through the accumulation
    F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()


def test_solo_bucket_reduces_the_fresh_gradient():
    """A gradient of kSoloBytes or more has a bucket of its own whose allreduce reads autograd's
    fresh gradient and writes the shared view (no copy by the hook): the view is p.grad after
    synchronize(), results match the manual reference, also when one rank keeps its views as
    p.grad (zero_grad(set_to_none=False): in place there) and the other does not."""
    from horovod.torch import _buckets

    def make(seed=0):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(6, 1024), torch.nn.Tanh(),
                                   torch.nn.Linear(1024, 1024), torch.nn.Tanh(),
                                   torch.nn.Linear(1024, 3))

    model, manual = make(), make()
    opt = hooked_sgd(model)
    opt_m = torch.optim.SGD(manual.parameters(), lr=0.1)
    big = model[2].weight
    assert big.numel() * big.element_size() >= _buckets.kSoloBytes
    for step in range(5):
        set_to_none = step < 2 or hvd.rank() == 0
        opt.zero_grad(set_to_none=set_to_none)
        # Read before backward: its hooks start the buckets' allreduces, which may be done by
        # the time backward returns.
        before = hvd.engine_counters().get(('cpu', 'shm_inplace'), 0)
        x, y = shard(80 + step, hvd.rank())
        F.cross_entropy(model(x), y).backward()
        fresh = big.grad
        opt.synchronize()
        if step > 0:
            bucket, view = opt._bucket_of[big]
            assert bucket.params == [big] and big.grad is view
            assert [len(b.params) for b in opt._buckets].count(1) == 1
            assert (fresh is view) == (not set_to_none)
            if bucket.shared:
                assert hvd.engine_counters().get(('cpu', 'shm_inplace'), 0) == before + len(opt._buckets)
        with opt.skip_synchronize():
            opt.step()
        manual_step(manual, opt_m, [80 + step])
        for p, q in zip(model.parameters(), manual.parameters()):
            assert torch.allclose(p, q, atol=1e-6), step


def test_bucket_knobs(monkeypatch):
    model = make_model()
    x, y = shard(2, hvd.rank())
    monkeypatch.setenv('HOROVOD_DISABLE_GRADIENT_BUCKETS', '1')
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    assert opt._buckets is None and opt._bucket_cap == 0
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    monkeypatch.delenv('HOROVOD_DISABLE_GRADIENT_BUCKETS')
    monkeypatch.setenv('HOROVOD_BUCKET_CAP_MB', '3')
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    assert opt._bucket_cap == 3 * 2 ** 20
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16)
    assert opt._bucket_cap == 0  # compression keeps the per-gradient path


# ---- broadcast_optimizer_state -------------------------------------------------------------------

OPTIMIZERS = [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
    (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.95))),
    (torch.optim.AdamW, dict(lr=0.01)),
    (torch.optim.Adagrad, dict(lr=0.01)),
    (torch.optim.Adadelta, dict(lr=0.5)),
    (torch.optim.Adamax, dict(lr=0.01)),
    (torch.optim.ASGD, dict(lr=0.01)),
    (torch.optim.NAdam, dict(lr=0.01)),
    (torch.optim.RAdam, dict(lr=0.01)),
    (torch.optim.RMSprop, dict(lr=0.01, momentum=0.5)),
    (torch.optim.Rprop, dict(lr=0.01, etas=(0.4, 1.3), step_sizes=(1e-5, 10))),
]


@pytest.mark.parametrize('opt_cls,kwargs', OPTIMIZERS, ids=[c.__name__ for c, _ in OPTIMIZERS])
def test_broadcast_optimizer_state(opt_cls, kwargs):
    model = make_model(seed=hvd.rank())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    local = dict(kwargs)
    if hvd.rank() != 0:  # different hyper-parameters off the root: the root's must win
        local['lr'] = kwargs['lr'] * 3
    opt = opt_cls(model.parameters(), **local)
    if hvd.rank() == 0:  # only the root has state; the others initialize theirs
        x, y = shard(11, 0)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    state = opt.state_dict()
    root_state = hvd.broadcast_object(state, root_rank=0)
    assert len(state['state']) == len(root_state['state'])
    for k, group in enumerate(state['param_groups']):
        for key, value in group.items():
            assert type(value) is type(root_state['param_groups'][k][key]), key
            assert value == root_state['param_groups'][k][key], key
    for pid, values in state['state'].items():
        for name, value in values.items():
            if torch.is_tensor(value):
                assert torch.equal(value, root_state['state'][pid][name])
            else:
                assert value == root_state['state'][pid][name]
    x, y = shard(12, hvd.rank())
    F.cross_entropy(model(x), y).backward()
    opt.step()  # still a working optimizer


def test_broadcast_optimizer_state_skips_frozen_and_rejects_lbfgs():
    model = make_model()
    frozen = torch.nn.Parameter(torch.ones(3, dtype=torch.int64), requires_grad=False)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(list(model.parameters()) + [frozen],
                                                    lr=0.01),
                                   named_parameters=list(model.named_parameters()) +
                                   [('frozen', frozen)])
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert frozen.grad is None
    with pytest.raises(ValueError, match='cannot broadcast torch.optim.LBFGS state'):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)


# ---- torch.compile -------------------------------------------------------------------------------

def test_compiled_model_matches_eager():
    eager = make_model(3)
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model)
    opt_e = hvd.DistributedOptimizer(torch.optim.SGD(eager.parameters(), lr=0.05),
                                     named_parameters=[('e.' + k, v)
                                                       for k, v in eager.named_parameters()])
    opt_c = hvd.DistributedOptimizer(torch.optim.SGD(compiled_model.parameters(), lr=0.05),
                                     named_parameters=[('c.' + k, v) for k, v in
                                                       compiled_model.named_parameters()])
    for step in range(50):
        x, y = shard(100 + step, hvd.rank())
        losses = []
        for model, opt in ((eager, opt_e), (compiled, opt_c)):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-6, (step, losses)


# ---- elastic -------------------------------------------------------------------------------------

def test_torch_state_save_restore_sync():
    model = make_model(seed=hvd.rank())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = hvd.elastic.TorchState(model, opt, epoch=hvd.rank(), batch=0)
    state.sync()  # rank 0's model and counters everywhere
    assert state.epoch == 0
    w0 = model[0].weight.detach().clone()
    assert torch.equal(hvd.broadcast(w0, 0), w0)
    state.commit()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    state.epoch = 5
    state.restore()
    assert torch.equal(model[0].weight, w0) and state.epoch == 0


def test_host_update_interrupts_every_rank_together():
    from horovod.common.elastic import ObjectState
    state = ObjectState(hvd.broadcast_object, hvd.rank, value=1)
    state.commit()  # no notification: nothing happens
    if hvd.rank() == 0:
        state.on_hosts_updated(1, HostUpdateResult.removed)
    with pytest.raises(HostsUpdatedInterrupt) as info:
        state.commit()
    assert info.value.skip_sync is True
    notification_manager.register_listener(state)
    notification_manager.remove_listener(state)


def test_elastic_run_restores_after_internal_error():
    model = make_model(seed=hvd.rank())
    state = hvd.elastic.TorchState(model, None, counter=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.counter)
        if len(calls) == 1:
            state.counter = 10
            state.commit()
            state.counter = 99  # uncommitted, must be rolled back
            raise HorovodInternalError('simulated failure')
        return state.counter

    assert train(state) == 10
    assert calls == [0, 10]
    assert hvd.is_initialized()


def test_elastic_sampler():
    dataset = list(range(10))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=False)
    mine = list(iter(sampler))
    n = hvd.size()
    assert len(sampler) == len(mine) == -(-10 // n)
    everyone = hvd.allgather_object(mine)
    assert sorted(set(i for part in everyone for i in part)) == dataset
    sampler.record_batch(0, 1)
    sampler.reset()
    assert len(sampler) == -(-(10 - n) // n)
    assert sampler.state_dict() == {'epoch': 0, 'processed_num': n}
    sampler.set_epoch(1)
    assert sampler.state_dict() == {'epoch': 1, 'processed_num': 0}

