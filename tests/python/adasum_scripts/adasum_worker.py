"""One rank of an Adasum job (test_adasum.py starts it under horovodrun or mpirun).

Checks, for every framework named on the command line (torch, tf, keras), allreduce and
grouped_allreduce with op=Adasum against the identities (equal vectors -> that vector,
orthogonal vectors -> their sum) and against the pairwise formula over the rank tree computed
here in numpy (per tensor for grouped ones), in every dtype; that extreme magnitudes stay
finite; the refusals (reducescatter, integer tensors); and the delta optimizers (torch: exact
first step against the formula, then convergence). Prints ``OK <check>`` per passed check.
"""

import sys

import numpy as np

TOL = {'float16': 2e-2, 'bfloat16': 6e-2, 'float32': 1e-5, 'float64': 1e-12}


def pair(a, b):
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    tiny = np.sqrt(np.finfo(np.float64).tiny)
    ca = 1.0 if aa < tiny else 1.0 - dot / (2 * aa)
    cb = 1.0 if bb < tiny else 1.0 - dot / (2 * bb)
    return ca * a + cb * b


def tree(vectors):
    v = [np.asarray(x, dtype=np.float64).ravel() for x in vectors]
    level = 1
    while level < len(v):
        for i in range(0, len(v) - level, 2 * level):
            v[i] = pair(v[i], v[i + level])
        level *= 2
    return v[0]


def values(rank, count, seed):
    """Rank-specific values correlated across ranks (shared mean), different per tensor."""
    g = np.random.default_rng(1000 * seed + rank)
    return 0.5 * seed + g.standard_normal(count)


def check_close(expected, got, dtype, what):
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    err = float(np.max(np.abs(expected - got))) if expected.size else 0.0
    assert err <= TOL[dtype] * scale, '%s: max error %g (tolerance %g)' % (what, err, TOL[dtype] * scale)


def ok(name):
    # One write per line: with PYTHONUNBUFFERED, print() writes its pieces separately, and mpirun
    # interleaves the ranks' pieces.
    sys.stdout.write('OK %s\n' % name)
    sys.stdout.flush()


# ---- torch ---------------------------------------------------------------------------------------

def torch_checks():
    import torch

    import horovod.torch as hvd
    hvd.init()
    n, r = hvd.size(), hvd.rank()
    dtypes = {'float16': torch.float16, 'bfloat16': torch.bfloat16, 'float32': torch.float32,
              'float64': torch.float64}
    for name, dt in dtypes.items():
        same = torch.arange(-5, 6, dtype=torch.float64).to(dt) * 0.5
        assert torch.equal(hvd.allreduce(same, op=hvd.Adasum, name='same.' + name), same), name
        ortho = torch.zeros(4 * n, dtype=dt)
        ortho[r::n] = torch.arange(1, 5, dtype=torch.float64).to(dt) + r
        total = hvd.allreduce(ortho, op=hvd.Sum, name='ortho_sum.' + name)
        assert torch.equal(hvd.allreduce(ortho, op=hvd.Adasum, name='ortho.' + name), total), name
        counts = [1, 7, 300, 4097]
        tensors = [torch.from_numpy(values(r, c, s)).to(dt) for s, c in enumerate(counts)]
        gathered = [hvd.allgather(t.double().unsqueeze(0), name='g%d.%s' % (i, name))
                    for i, t in enumerate(tensors)]
        refs = [tree([g[k].numpy() for k in range(n)]) for g in gathered]
        single = hvd.allreduce(tensors[2], op=hvd.Adasum, name='single.' + name)
        check_close(refs[2], single.double().numpy(), name, 'single ' + name)
        grouped = hvd.grouped_allreduce(tensors, op=hvd.Adasum, name='grouped.' + name)
        for k, (ref, out) in enumerate(zip(refs, grouped)):
            assert out.dtype == dt
            check_close(ref, out.double().numpy(), name, 'grouped %s tensor %d' % (name, k))
        inplace = [t.clone() for t in tensors]
        hvd.grouped_allreduce_(inplace, op=hvd.Adasum, name='grouped_.' + name)
        for a, b in zip(grouped, inplace):
            assert torch.equal(a, b), 'in place differs from out of place (%s)' % name
        scaled = hvd.allreduce(tensors[2], op=hvd.Adasum, name='scaled.' + name,
                               prescale_factor=2.0, postscale_factor=0.25)
        check_close(0.5 * refs[2], scaled.double().numpy(), name, 'scaled ' + name)
        ok('torch_identities_' + name)
    for magnitude, dt in ((1e30, torch.float32), (1e-30, torch.float32), (1e300, torch.float64),
                          (5e3, torch.float16)):
        x = (torch.from_numpy(values(r, 64, 3)) * magnitude).to(dt)
        out = hvd.allreduce(x, op=hvd.Adasum, name='extreme.%g' % magnitude)
        assert torch.isfinite(out).all(), 'not finite at %g' % magnitude
    ok('torch_extreme_magnitudes')
    try:
        hvd.reducescatter(torch.ones(4 * n), op=hvd.Adasum, name='rs_adasum')
        raise AssertionError('reducescatter accepted Adasum')
    except (RuntimeError, hvd.HorovodInternalError) as e:
        assert 'Reducescatter currently only supports AVERAGE and SUM' in str(e), e
    try:
        hvd.allreduce(torch.ones(4, dtype=torch.int32), op=hvd.Adasum, name='int_adasum')
        raise AssertionError('an int32 Adasum was accepted')
    except (RuntimeError, ValueError, hvd.HorovodInternalError) as e:
        assert 'Adasum reduces only float16, bfloat16, float32 and float64' in str(e), e
    ok('torch_refusals')
    torch_optimizer_checks(hvd, torch)


def torch_optimizer_checks(hvd, torch):
    n, r = hvd.size(), hvd.rank()
    torch.manual_seed(0)
    true_w = torch.tensor([[1.5, -2.0, 0.5, 3.0]])
    g = torch.Generator().manual_seed(100 + r)
    xs = torch.randn(256, 4, generator=g)
    ys = xs @ true_w.t() + 0.01 * torch.randn(256, 1, generator=g)

    # One step, checked against the formula: weights = start + Adasum(-lr * grad_r).
    model = torch.nn.Linear(4, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    start = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    loss = torch.nn.functional.mse_loss(model(xs), ys)
    grads = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
    loss.backward()
    opt.step()
    for (name, p), grad in zip(model.named_parameters(), grads):
        deltas = hvd.allgather((-0.05 * grad).double().reshape(1, -1), name='delta.' + name)
        expected = start[name].double().numpy().ravel() + tree([deltas[k].numpy() for k in range(n)])
        check_close(expected, p.detach().double().numpy().ravel(), 'float32', 'delta step ' + name)
    ok('torch_delta_optimizer_step')

    # Convergence: SGD, SGD with local gradient accumulation over two passes per step, and Adam
    # (per-parameter state; its initial state broadcast as a training script does).
    for passes, make in ((1, lambda ps: torch.optim.SGD(ps, lr=0.05)),
                         (2, lambda ps: torch.optim.SGD(ps, lr=0.05)),
                         (1, lambda ps: torch.optim.Adam(ps, lr=0.1))):
        model = torch.nn.Linear(4, 1)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(make(model.parameters()),
                                       named_parameters=model.named_parameters(), op=hvd.Adasum,
                                       backward_passes_per_step=passes)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        initial = torch.nn.functional.mse_loss(model(xs), ys).item()
        for step in range(60):
            opt.zero_grad()
            for k in range(passes):
                batch = slice((step * passes + k) * 16 % 256, (step * passes + k) * 16 % 256 + 16)
                torch.nn.functional.mse_loss(model(xs[batch]), ys[batch]).backward()
            opt.step()
        final = torch.nn.functional.mse_loss(model(xs), ys).item()
        assert final < 0.05 and final < initial / 100, 'did not converge (%s, passes=%d): %g -> %g' % (
            type(opt).__name__, passes, initial, final)
        w = model.weight.detach().reshape(1, -1)
        everyone = hvd.allgather(w, name='final_w.%s.%d' % (type(opt).__name__, passes))
        assert all(torch.equal(everyone[0], everyone[k]) for k in range(n)), 'ranks differ'
        try:
            with opt.skip_synchronize():
                pass
            raise AssertionError('skip_synchronize accepted')
        except AssertionError as e:
            assert 'Skipping synchronization is not supported' in str(e), e
    ok('torch_delta_optimizer_converges')


# ---- TensorFlow and Keras ------------------------------------------------------------------------

def tf_checks():
    import tensorflow as tf

    import horovod.tensorflow as hvd
    hvd.init()
    r = hvd.rank()
    for name, dt in (('float16', tf.float16), ('bfloat16', tf.bfloat16), ('float32', tf.float32),
                     ('float64', tf.float64)):
        counts = [3, 500, 33]
        tensors = [tf.cast(values(r, c, s), dt) for s, c in enumerate(counts)]
        gathered = [hvd.allgather(tf.cast(t, tf.float64)[None], name='tfg%d.%s' % (i, name)).numpy()
                    for i, t in enumerate(tensors)]
        refs = [tree(list(g)) for g in gathered]
        single = hvd.allreduce(tensors[1], op=hvd.Adasum, name='tf_single.' + name)
        check_close(refs[1], tf.cast(single, tf.float64).numpy(), name, 'tf single ' + name)
        grouped = hvd.grouped_allreduce(tensors, op=hvd.Adasum, name='tf_grouped.' + name)
        for k, (ref, out) in enumerate(zip(refs, grouped)):
            check_close(ref, tf.cast(out, tf.float64).numpy(), name, 'tf grouped %s %d' % (name, k))
        ok('tf_identities_' + name)

    # DistributedGradientTape(op=Adasum): the gradients are Adasum-combined across ranks.
    w = tf.Variable([1.0, -1.0, 2.0])
    x = tf.constant(values(r, 3, 7), tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * x) ** 2
    tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
    (grad,) = tape.gradient(loss, [w])
    local = (2 * tf.reduce_sum(w * x) * x).numpy().astype(np.float64)
    ref = tree(list(hvd.allgather(local[None], name='tape_local').numpy()))
    check_close(ref, grad.numpy().astype(np.float64), 'float32', 'gradient tape')
    ok('tf_gradient_tape')

    # Legacy optimizer: the delta optimizer, weights = start + Adasum(-lr * grad_r).
    v = tf.Variable([0.5, 0.25, -1.0], dtype=tf.float64)
    g = tf.constant(values(r, 3, 8), tf.float64)
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), op=hvd.Adasum)
    start = v.numpy().copy()
    opt.apply_gradients([(g, v)])
    deltas = hvd.allgather((-0.1 * g)[None], name='tf_deltas').numpy()
    # float32 tolerance: the legacy optimizer holds its learning rate as a float32 constant.
    check_close(start + tree(list(deltas)), v.numpy(), 'float32', 'tf delta optimizer')

    # backward_passes_per_step=2: the first step is local, the second combines both.
    v = tf.Variable([0.5, 0.25, -1.0], dtype=tf.float64)
    g1, g2 = tf.constant(values(r, 3, 10), tf.float64), tf.constant(values(r, 3, 11), tf.float64)
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    start = v.numpy().copy()
    opt.apply_gradients([(g1, v)])
    check_close(start - 0.1 * g1.numpy(), v.numpy(), 'float32', 'tf delta optimizer, local step')
    opt.apply_gradients([(g2, v)])
    deltas = hvd.allgather((-0.1 * (g1 + g2))[None], name='tf_deltas2').numpy()
    check_close(start + tree(list(deltas)), v.numpy(), 'float32', 'tf delta optimizer, 2 passes')
    ok('tf_delta_optimizer')


def keras_checks():
    import tensorflow as tf

    import horovod.tensorflow.keras as hvd
    hvd.init()
    r = hvd.rank()
    x = tf.constant(values(r, 40, 9), tf.float32)
    got = hvd.allreduce(x, op=hvd.Adasum if hasattr(hvd, 'Adasum') else 2, name='keras_adasum')
    import horovod.tensorflow as htf
    ref = tree(list(htf.allgather(tf.cast(x, tf.float64)[None], name='keras_g').numpy()))
    check_close(ref, np.asarray(got, dtype=np.float64), 'float32', 'keras allreduce')
    try:
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), op=2)
        raise AssertionError('Keras DistributedOptimizer accepted Adasum')
    except ValueError as e:
        assert 'op currently only supports Average and Sum' in str(e), e
    ok('keras_allreduce')


if __name__ == '__main__':
    for framework in sys.argv[1:]:
        {'torch': torch_checks, 'tf': tf_checks, 'keras': keras_checks}[framework]()
    sys.stdout.write('DONE\n')
    sys.stdout.flush()
