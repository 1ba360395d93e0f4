"""horovod.tensorflow.keras and horovod.keras on Keras 3 (TensorFlow backend), run on every
rank under ``horovodrun -np N`` (N >= 2). The other Keras flavours (tf-keras, Keras on PyTorch
and JAX) run in test_keras_backends.py.

Training checks compare against arithmetic, not against "it ran": N ranks with batch b each
and an averaged gradient must match one process with batch N*b on the same samples
(shuffle=False, rank r takes samples r, r+N, ...), to float32 rounding.
"""

import os
import warnings

import numpy as np
import pytest

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
tf = pytest.importorskip('tensorflow')
keras = pytest.importorskip('keras')

import horovod.keras as hk  # noqa: E402
import horovod.tensorflow.keras as hvd  # noqa: E402
from horovod._keras import numpy_ops  # noqa: E402
from horovod.common.exceptions import HorovodInternalError  # noqa: E402

COMMON = ('init shutdown is_initialized start_timeline stop_timeline size local_size cross_size '
          'rank local_rank cross_rank mpi_threads_supported mpi_enabled mpi_built gloo_enabled '
          'gloo_built nccl_built ddl_built ccl_built cuda_built rocm_built Average Sum '
          'global_process_set Compression callbacks elastic DistributedOptimizer '
          'broadcast_global_variables allreduce allgather broadcast reducescatter '
          'load_model').split()
CALLBACKS = ('BroadcastGlobalVariablesCallback MetricAverageCallback LearningRateScheduleCallback '
             'LearningRateWarmupCallback BestModelCheckpoint').split()
ELASTIC = 'KerasState CommitStateCallback UpdateBatchStateCallback UpdateEpochStateCallback run'

LR = 0.05


@pytest.fixture(scope='module', autouse=True)
def horovod_initialized():
    hvd.init(process_sets='dynamic')
    assert hvd.size() >= 2, 'run under horovodrun -np 2 or more'
    yield


def all_equal(array):
    """True iff ``array`` is bitwise identical on every rank."""
    gathered = numpy_ops.allgather(np.asarray(array, dtype=np.float64).reshape(1, -1))
    return np.array_equal(gathered, np.repeat(gathered[:1], len(gathered), axis=0))


def weights(model):
    return np.concatenate([np.asarray(v.numpy()).ravel() for v in model.weights])


def data(n=96):
    rng = np.random.RandomState(0)
    x = rng.randn(n, 4).astype('float32')
    y = (x @ np.array([1., -2., 3., .5], dtype='float32'))[:, None]
    return x, y


def shard(array):
    return array[hvd.rank()::hvd.size()]


def linear_model(seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])


def train(optimizer, distributed, batch=8, epochs=2, callbacks=(), seed=1, wrap=None):
    """Fits linear_model: ``distributed`` = this rank's shard with batch ``batch``; else all
    samples with batch ``size * batch`` (the equivalent single-process run)."""
    model = linear_model(seed)
    opt = optimizer
    if distributed:
        opt = (wrap or hvd.DistributedOptimizer)(optimizer)
    model.compile(optimizer=opt, loss='mse')
    x, y = data()
    if distributed:
        x, y, bs = shard(x), shard(y), batch
    else:
        bs = batch * hvd.size()
    history = model.fit(x, y, batch_size=bs, epochs=epochs, shuffle=False, verbose=0,
                        callbacks=list(callbacks))
    return model, history


# ---- surface ---------------------------------------------------------------------------------

def test_exports():
    for module in (hvd, hk):
        assert [n for n in COMMON if not hasattr(module, n)] == []
        assert [n for n in CALLBACKS if not hasattr(module.callbacks, n)] == []
        assert [n for n in ELASTIC.split() if not hasattr(module.elastic, n)] == []
    for name in ('ProcessSet', 'add_process_set', 'remove_process_set'):
        assert hasattr(hvd, name)
    assert hk.Adasum == 2 and hvd.Average == 0 and hvd.Sum == 1
    assert hasattr(hk, 'PartialDistributedOptimizer')
    assert hvd.rank() == int(os.environ.get('HOROVOD_RANK', hvd.rank()))
    assert hvd.is_initialized() and hk.size() == hvd.size()


def test_value_collectives():
    r, n = hvd.rank(), hvd.size()
    assert np.allclose(hvd.allreduce([1.0, 2.0 * r]).numpy(), [1.0, n - 1.0])
    assert np.allclose(hvd.allreduce(np.float32(r), op=hvd.Sum, name='s').numpy(),
                       n * (n - 1) / 2)
    assert np.allclose(hvd.allreduce(1.0, op=hvd.Sum, prescale_factor=2.0,
                                     postscale_factor=0.5).numpy(), n)
    assert np.allclose(hvd.allreduce(np.ones(3, 'float32') * r,
                                     compression=hvd.Compression.fp16).numpy(), (n - 1) / 2)
    assert hvd.allgather(np.full((r + 1, 2), r, 'int32')).numpy().shape == (n * (n + 1) // 2, 2)
    assert hvd.broadcast(np.float32(r + 5), 1).numpy() == 6
    rows = hvd.reducescatter(np.ones((2 * n, 3), 'float32'), op=hvd.Sum).numpy()
    assert rows.shape == (2, 3) and np.all(rows == n)
    # horovod.keras: average=True is the default, so op= alone conflicts (Horovod's gotcha).
    with pytest.raises(ValueError, match='op parameter supersedes average'):
        hk.allreduce(1.0, op=hk.Sum)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        assert np.allclose(hk.allreduce(float(r)), (n - 1) / 2)
    assert np.allclose(hk.allreduce(1.0, average=None, op=hk.Sum), n)
    assert np.allclose(np.asarray(hk.allgather(np.array([r]))), np.arange(n))
    assert np.asarray(hk.broadcast(np.array([r]), 0))[0] == 0
    assert np.asarray(hk.reducescatter(np.ones((n, 2), 'float32'))).shape == (1, 2)


def test_broadcast_global_variables_needs_graph_mode():
    with pytest.raises(RuntimeError, match='BroadcastGlobalVariablesCallback'):
        hvd.broadcast_global_variables(0)
    with pytest.raises(RuntimeError, match='BroadcastGlobalVariablesCallback'):
        hk.broadcast_global_variables(0)


# ---- DistributedOptimizer --------------------------------------------------------------------

def test_optimizer_is_a_new_instance_of_the_same_class():
    base = keras.optimizers.SGD(0.1, momentum=0.5, name='my_sgd')
    opt = hvd.DistributedOptimizer(base)
    assert opt is not base and isinstance(opt, keras.optimizers.SGD)
    assert type(opt).__name__ == 'SGD' and type(opt).__module__ == type(base).__module__
    assert opt.get_config() == base.get_config()
    assert hvd.DistributedOptimizer(base, name='renamed').name == 'renamed'
    assert type(hvd.DistributedOptimizer(opt)) is type(opt)  # wrapping twice: same class


def test_device_dense_places_the_reduction():
    """fit with device_dense set trains exactly like the single-process run (the reduction ran,
    placed on the named device), and the optimizer carries the placement to its reducer."""
    sgd = keras.optimizers.SGD(0.05)
    wrap = lambda opt: hvd.DistributedOptimizer(opt, device_dense='/cpu:0')  # noqa: E731
    model, _ = train(sgd, distributed=True, wrap=wrap)
    reference, _ = train(keras.optimizers.SGD(0.05), distributed=False)
    for a, b in zip(weights(model), weights(reference)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), device_dense='/cpu:0')
    assert opt._hvd.device_kwargs == {'device_dense': '/cpu:0', 'device_sparse': ''}


def test_optimizer_validation():
    sgd = keras.optimizers.SGD(0.1)
    for op in (hk.Adasum, 3):
        with pytest.raises(ValueError, match='op currently only supports Average and Sum'):
            hvd.DistributedOptimizer(sgd, op=op)
    with pytest.raises(ValueError, match='gradient_predivide_factor not supported with op'):
        hvd.DistributedOptimizer(sgd, op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match='backward_passes_per_step must be > 0'):
        hvd.DistributedOptimizer(sgd, backward_passes_per_step=0)
    for groups in (-1, 'two', [[np.zeros(2)]]):
        with pytest.raises(ValueError, match='groups'):
            hvd.DistributedOptimizer(sgd, groups=groups)
    v = keras.Variable(np.zeros(2))
    with pytest.raises(ValueError, match='only appear once in groups'):
        hvd.DistributedOptimizer(sgd, groups=[[v], [v]])
    with pytest.warns(DeprecationWarning):
        hvd.DistributedOptimizer(sgd, num_groups=2)


@pytest.mark.parametrize('options', [
    {}, {'gradient_predivide_factor': 2.0}, {'groups': 2}, {'num_groups': 3},
    {'compression': hvd.Compression.bf16}],
    ids=['plain', 'predivide', 'groups', 'num_groups', 'bf16'])
def test_fit_equals_one_process_with_the_global_batch(options):
    def wrap(opt):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)
            return hvd.DistributedOptimizer(opt, **options)
    dist, _ = train(keras.optimizers.SGD(LR, momentum=0.9), True, wrap=wrap)
    single, _ = train(keras.optimizers.SGD(LR, momentum=0.9), False)
    tol = 2e-2 if 'compression' in options else 1e-5
    assert np.allclose(weights(dist), weights(single), atol=tol)
    assert all_equal(weights(dist))


def test_sum_equals_learning_rate_times_size():
    dist, _ = train(keras.optimizers.SGD(LR), True,
                    wrap=lambda o: hvd.DistributedOptimizer(o, op=hvd.Sum))
    single, _ = train(keras.optimizers.SGD(LR * hvd.size()), False)
    assert np.allclose(weights(dist), weights(single), atol=1e-5)


def test_groups_of_variables():
    model = linear_model()
    first = model.layers[0]
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR),
                                   groups=[[first.kernel, first.bias]])
    model.compile(optimizer=opt, loss='mse')
    x, y = data()
    model.fit(shard(x), shard(y), batch_size=8, epochs=1, shuffle=False, verbose=0)
    single, _ = train(keras.optimizers.SGD(LR), False, epochs=1)
    assert np.allclose(weights(model), weights(single), atol=1e-5)


@pytest.mark.parametrize('average', [True, False])
def test_backward_passes_per_step(average):
    # 2 local passes of batch 4 each = one pass of batch 8: with averaging the same as the
    # global batch; summed it is the global batch at twice the learning rate.
    wrap = lambda o: hvd.DistributedOptimizer(o, backward_passes_per_step=2,  # noqa: E731
                                              average_aggregated_gradients=average)
    dist, _ = train(keras.optimizers.SGD(LR), True, batch=4, wrap=wrap)
    single, _ = train(keras.optimizers.SGD(LR if average else 2 * LR), False, batch=8)
    assert np.allclose(weights(dist), weights(single), atol=1e-5)
    steps = 2 * len(shard(data()[0])) // 4
    assert int(dist.optimizer.iterations.numpy()) == steps


def test_keras3_agg_helper_and_compute_gradients():
    # Keras 3 optimizers compute no gradients: Horovod's tf-keras _compute_gradients is a clear
    # error here; _agg_helper is None without local aggregation, else its counter is the number
    # of passes since the last allreduce.
    for module in (hvd, hk):
        assert module.DistributedOptimizer(keras.optimizers.SGD(LR))._agg_helper is None
        opt = module.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=3)
        var = keras.Variable([0.0])
        with pytest.raises(NotImplementedError, match='Keras 3 optimizers do not compute'):
            opt._compute_gradients(lambda: var * 2.0, [var])
        for k in range(7):
            opt.apply_gradients([(tf.constant([float(hvd.rank() + 1)]), var)])
            assert int(opt._agg_helper.counter) == (k + 1) % 3
            applied = (k + 1) // 3
            assert np.allclose(var.numpy(), -applied * 3 * (hvd.size() + 1) / 2)


def test_custom_loop_eager_and_tf_function():
    x, y = data(16 * hvd.size())
    model = linear_model()
    model(x[:1])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR))
    ref_model = linear_model()
    ref_model(x[:1])
    ref = keras.optimizers.SGD(LR)

    def grads_of(m, xs, ys):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(xs) - ys) ** 2)
        return tape.gradient(loss, m.trainable_variables)

    @tf.function
    def graph_step(xs, ys):
        opt.apply_gradients(zip(grads_of(model, xs, ys), model.trainable_variables))

    xs, ys = shard(x), shard(y)
    opt.apply_gradients(zip(grads_of(model, xs[:8], ys[:8]), model.trainable_variables))
    graph_step(xs[8:], ys[8:])
    n = hvd.size()
    ref.apply_gradients(zip(grads_of(ref_model, x[:8 * n], y[:8 * n]),
                            ref_model.trainable_variables))
    ref.apply_gradients(zip(grads_of(ref_model, x[8 * n:], y[8 * n:]),
                            ref_model.trainable_variables))
    assert np.allclose(weights(model), weights(ref_model), atol=1e-5)


def test_register_local_var():
    model = linear_model(seed=1 + hvd.rank())  # different weights on every rank
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR))
    local = model.layers[1].kernel
    opt.register_local_var(local)
    model.compile(optimizer=opt, loss='mse')
    x, y = data()
    model.fit(shard(x), shard(y), batch_size=8, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(
                  0, local_variables=[local])])
    assert all_equal(model.layers[0].kernel.numpy())
    assert not all_equal(local.numpy())


def test_partial_distributed_optimizer():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match='local_layers'):
        hk.PartialDistributedOptimizer(keras.optimizers.SGD(LR), local_layers=['dense'])
    opt = hk.PartialDistributedOptimizer(keras.optimizers.SGD(LR),
                                         local_layers=model.layers[1])
    model.compile(optimizer=opt, loss='mse')
    x, y = data()
    model.fit(shard(x), shard(y) * (1 + hvd.rank()), batch_size=8, epochs=1, verbose=0,
              callbacks=[hk.callbacks.BroadcastGlobalVariablesCallback(
                  0, local_variables=model.layers[1].trainable_weights)])
    assert all_equal(model.layers[0].kernel.numpy())
    assert not all_equal(model.layers[1].kernel.numpy())


@pytest.mark.parametrize('sparse_as_dense', [False, True])
def test_embedding_gradients(sparse_as_dense):
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((2,), dtype='int32'), keras.layers.Embedding(10, 3),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR),
                                                     sparse_as_dense=sparse_as_dense),
                  loss='mse')
    x = np.random.RandomState(hvd.rank()).randint(0, 10, (32, 2)).astype('int32')
    model.fit(x, x[:, :1].astype('float32'), batch_size=8, epochs=1, verbose=0)
    assert all_equal(weights(model))


def test_process_set_optimizer():
    even = hvd.add_process_set([r for r in range(hvd.size()) if r % 2 == 0])
    try:
        model = linear_model(seed=1 + hvd.rank())
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR),
                                                         process_set=even), loss='mse')
        x, y = data()
        if even.included():
            bcast = numpy_ops.broadcast_many([v.numpy() for v in model.weights], 0,
                                             ['ps_init.%d' % i for i in range(4)],
                                             process_set=even)
            for v, value in zip(model.weights, bcast):
                v.assign(value)
        model.fit(shard(x), shard(y), batch_size=8, epochs=1, shuffle=False, verbose=0)
        w = weights(model)
        gathered = numpy_ops.allgather(w[None].astype(np.float64))
        evens = gathered[::2]
        assert np.array_equal(evens, np.repeat(evens[:1], len(evens), axis=0))
        assert not np.array_equal(gathered[0], gathered[1])
    finally:
        hvd.remove_process_set(even)


# ---- callbacks -------------------------------------------------------------------------------

def test_broadcast_callback_makes_ranks_identical():
    with pytest.raises(ValueError, match='local_variables'):
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[1.0])
    model = linear_model(seed=1 + hvd.rank())
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss='mse')
    x, y = data()
    assert not all_equal(weights(model))
    cb = hvd.callbacks.BroadcastGlobalVariablesCallback(0)
    model.fit(shard(x), shard(y), batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    assert cb.broadcast_done
    assert all_equal(weights(model))
    opt_state = np.concatenate([np.asarray(v.numpy(), np.float64).ravel()
                                for v in model.optimizer.variables])
    assert all_equal(opt_state)


def test_metric_average_callback():
    r, n = hvd.rank(), hvd.size()
    logs = {'loss': float(r), 'acc': np.float32(2 * r), 'name': 'text'}
    hvd.callbacks.MetricAverageCallback().on_epoch_end(0, logs)
    assert logs == {'loss': (n - 1) / 2, 'acc': float(n - 1), 'name': 'text'}
    # In fit: each rank's loss differs (its own data), the averaged history does not.
    model = linear_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss='mse')
    x, y = data()
    history = model.fit(shard(x), shard(y) * (1 + r), batch_size=8, epochs=2, verbose=0,
                        callbacks=[hvd.callbacks.MetricAverageCallback()])
    assert all_equal(history.history['loss'])


class RecordLR(keras.callbacks.Callback):
    """Records (epoch, batch, lr, momentum buffers' norm) at every batch begin."""

    def __init__(self):
        super().__init__()
        self.values = {}
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.values[(self.epoch, batch)] = float(self.model.optimizer.learning_rate.numpy())


def fit_recording(schedule, epochs=4, momentum=0.0):
    model = linear_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=momentum)),
                  loss='mse')
    record = RecordLR()
    x, y = data(64 * hvd.size())
    history = model.fit(shard(x), shard(y), batch_size=16, epochs=epochs, verbose=0,
                        callbacks=[schedule, record])
    return record.values, history, model


def test_learning_rate_schedule_staircase():
    values, history, _ = fit_recording(hvd.callbacks.LearningRateScheduleCallback(
        LR, multiplier=0.5, start_epoch=1, end_epoch=3))
    for (epoch, batch), lr in values.items():
        expected = LR if epoch == 0 else LR * 0.5 ** (min(epoch, 2) - 1)
        assert np.isclose(lr, expected), (epoch, batch, lr)
    assert np.allclose(history.history['lr'], [LR, LR, LR / 2, LR / 2])


def test_learning_rate_schedule_smooth():
    steps = 4
    values, _, _ = fit_recording(hvd.callbacks.LearningRateScheduleCallback(
        LR, multiplier=lambda e: 1.0 / (1.0 + e), staircase=False), epochs=2)
    for (epoch, batch), lr in values.items():
        assert np.isclose(lr, LR / (1.0 + epoch + batch / steps), rtol=1e-6), (epoch, batch)


def test_learning_rate_warmup_values_and_message(capsys):
    n, steps, warmup = hvd.size(), 4, 2
    values, history, _ = fit_recording(hvd.callbacks.LearningRateWarmupCallback(
        LR, warmup_epochs=warmup, verbose=1), epochs=3)
    for (epoch, batch), lr in values.items():
        if epoch < warmup:
            e = epoch + (batch + 1) / steps
            expected = LR / n * (e * (n - 1) / warmup + 1)
        else:
            expected = LR  # stays at the last warmup value
        assert np.isclose(lr, expected, rtol=1e-6), (epoch, batch, lr, expected)
    assert np.isclose(history.history['lr'][warmup - 1], LR)
    out = capsys.readouterr().out
    if hvd.rank() == 0:
        assert 'Epoch 2: finished gradual learning rate warmup to 0.05.' in out
    else:
        assert 'warmup' not in out


def test_momentum_correction_scales_the_velocity():
    model = linear_model()
    opt = keras.optimizers.SGD(LR, momentum=0.9)
    model.compile(optimizer=opt, loss='mse')
    x, y = data(32)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    before = [m.numpy().copy() for m in opt.momentums]
    cb = hvd.callbacks.LearningRateScheduleCallback(LR, multiplier=0.25)
    cb.set_model(model)
    cb.on_epoch_begin(2)
    cb.on_batch_begin(0)
    assert np.isclose(float(opt.learning_rate.numpy()), LR * 0.0625)
    for b, m in zip(before, opt.momentums):
        assert np.allclose(m.numpy(), b * 0.0625)
    cb = hvd.callbacks.LearningRateScheduleCallback(LR, multiplier=0.5,
                                                    momentum_correction=False)
    cb.set_model(model)
    cb.on_epoch_begin(1)
    cb.on_batch_begin(0)
    assert np.allclose(opt.momentums[0].numpy(), before[0] * 0.0625)


def test_schedule_argument_errors():
    with pytest.raises(ValueError, match='Parameter `initial_lr` is required'):
        hvd.callbacks.LearningRateScheduleCallback(None, 0.5)
    with pytest.raises(ValueError, match='Parameter `initial_lr` is required'):
        hk.callbacks.LearningRateWarmupCallback(None)
    cb = hvd.callbacks.LearningRateWarmupCallback(LR)
    cb.set_params({})
    with pytest.raises(ValueError, match='steps_per_epoch'):
        cb.on_train_begin()


def test_best_model_checkpoint(tmp_path):
    cb = hvd.callbacks.BestModelCheckpoint(monitor='loss')
    assert cb.filepath is None and cb.save_best_only
    model = linear_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss='mse')
    x, y = data()
    with pytest.raises(ValueError, match='filepath'):
        model.fit(shard(x), shard(y), epochs=1, verbose=0, callbacks=[cb])
    cb.filepath = str(tmp_path / 'best_{epoch}.keras')
    model.fit(shard(x), shard(y), epochs=3, verbose=0,
              callbacks=[hvd.callbacks.MetricAverageCallback(), cb])
    assert sorted(os.listdir(tmp_path)) == ['best_1.keras', 'best_2.keras', 'best_3.keras']


# ---- saving ----------------------------------------------------------------------------------

@pytest.mark.parametrize('saved_distributed', [True, False])
def test_save_and_load_model(tmp_path, saved_distributed):
    model, _ = train(keras.optimizers.Adam(0.01), saved_distributed, epochs=1)
    path = str(tmp_path / 'model.keras')
    model.save(path)
    loaded = hvd.load_model(path, compression=hvd.Compression.fp16)
    assert type(loaded.optimizer).__name__ == 'Adam'
    assert loaded.optimizer._hvd.compression is hvd.Compression.fp16
    assert len(model.optimizer.variables) == len(loaded.optimizer.variables)
    for a, b in zip(model.optimizer.variables, loaded.optimizer.variables):
        assert np.array_equal(a.numpy(), b.numpy())
    assert np.array_equal(weights(model), weights(loaded))
    x, y = data()
    loaded.fit(shard(x), shard(y), batch_size=8, epochs=1, verbose=0)
    assert all_equal(weights(loaded))
    # Loads as a plain Keras model too.
    plain = keras.models.load_model(path)
    assert type(plain.optimizer) is keras.optimizers.Adam


def test_load_model_custom_optimizers_and_objects(tmp_path):
    @keras.saving.register_keras_serializable(package='test')
    class MySGD(keras.optimizers.SGD):
        pass

    model = linear_model()
    model.compile(optimizer=MySGD(LR), loss='mse')
    path = str(tmp_path / 'custom.keras')
    model.save(path)
    loaded = hk.load_model(path, custom_optimizers=[MySGD])
    assert isinstance(loaded.optimizer, MySGD) and hasattr(loaded.optimizer, '_hvd')

    class Scale(keras.layers.Layer):
        def call(self, x):
            return 2.0 * x

    model = keras.Sequential([keras.Input((4,)), Scale(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(LR), loss='mse')
    model.save(path)
    with pytest.raises(TypeError, match='Scale'):
        hk.load_model(path)
    loaded = hk.load_model(path, custom_objects={'Scale': Scale})
    assert hasattr(loaded.optimizer, '_hvd') and type(loaded.layers[0]) is Scale


# ---- elastic ---------------------------------------------------------------------------------

def test_keras_state_save_restore_sync():
    with pytest.raises(ValueError, match='Model must be built first'):
        hvd.elastic.KerasState(keras.Sequential([keras.layers.Dense(1)]))
    model = linear_model(seed=1 + hvd.rank())
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.9)),
                  loss='mse')
    x, y = data()
    model.fit(shard(x), shard(y), batch_size=8, epochs=1, verbose=0)
    state = hvd.elastic.KerasState(model, epoch=3 + hvd.rank(), batch=0)
    saved = weights(model)
    model.layers[0].kernel.assign(model.layers[0].kernel * 0)
    state.epoch = 100
    state.restore()
    assert np.array_equal(weights(model), saved) and state.epoch == 3 + hvd.rank()
    state.sync()
    assert all_equal(weights(model)) and state.epoch == 3
    opt_state = np.concatenate([np.asarray(v.numpy(), np.float64).ravel()
                                for v in model.optimizer.variables])
    assert all_equal(opt_state)


def test_elastic_state_callbacks():
    model = linear_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss='mse')
    model.build((None, 4))
    state = hk.elastic.KerasState(model, epoch=5, batch=0)
    commits = []
    state.commit = lambda: commits.append((state.epoch, state.batch))
    x, y = data(16 * 3 * hvd.size())
    model.fit(shard(x), shard(y), batch_size=16, epochs=2, verbose=0, callbacks=[
        hk.elastic.UpdateBatchStateCallback(state), hk.elastic.UpdateEpochStateCallback(state),
        hk.elastic.CommitStateCallback(state, batches_per_commit=2)])
    assert state.epoch == 7 and state.batch == 0
    # 3 batches per epoch, a commit every 2nd batch and at each epoch end; the batch counter
    # carries over epochs (batch 0 of the second epoch is the 4th batch).
    assert commits == [(5, 1), (6, 0), (6, 0), (6, 2), (7, 0)]


def test_elastic_run_restores_and_resets():
    model = linear_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss='mse')
    model.build((None, 4))
    state = hvd.elastic.KerasState(model, epoch=0)
    state.commit()
    calls, resets = [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train_fn(s):
        calls.append(s.epoch)
        if len(calls) == 1:
            s.epoch = 9  # uncommitted progress, rolled back
            raise HorovodInternalError('simulated peer failure')
        return s.epoch

    assert train_fn(state) == 0
    assert calls == [0, 0] and resets == [hvd.size()]
    assert hvd.is_initialized()
