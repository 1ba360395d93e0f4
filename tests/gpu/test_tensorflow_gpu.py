"""horovod.tensorflow on TensorFlow GPU tensors, under the launcher (test_gpu_suite.py).

TensorFlow here is tensorflow-cpu with the stand-in's PluggableDevice "GPU" (tf_standin_gpu,
tests/gpu/tf_device): its GPU tensors are stand-in device memory and its copies run on stand-in
streams, so Horovod's GPU kernels (cpp/frameworks/tensorflow/kernels.cc) run the collectives
through the CUDA backend of the path asked for (HOROVOD_GPU_OPERATIONS), and the stand-in's
ordering checker sees TensorFlow's copies and Horovod's device work together: a Horovod kernel
that touched a TensorFlow buffer without ordering after TensorFlow's streams, or released an
output TensorFlow still reads, puts the device in error (every later call fails).

Every rank runs the same tests in the same order. TensorFlow's math kernels do not run on this
"GPU" (tf_device/README.md), so inputs are made on the CPU and copied onto the GPU with
tf.identity; results are read back with .numpy().
"""

import os

import numpy as np
import pytest

tf_standin_gpu = pytest.importorskip('tf_standin_gpu')
GPUS = tf_standin_gpu.load()  # before TensorFlow runs any op

import tensorflow as tf  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402
from horovod import _core  # noqa: E402


@pytest.fixture(scope='module', autouse=True)
def horovod():
    hvd.init()
    yield
    hvd.shutdown()


def gpu():
    """This rank's GPU: one per rank on the NCCL path, all on GPU 0 on the host-staged path."""
    return GPUS[hvd.rank() % len(GPUS)]


def on_gpu(value, dtype=tf.float32):
    with tf.device('/CPU:0'):
        host = tf.constant(value, dtype=dtype)
    with tf.device(gpu()):
        return tf.identity(host)


def assert_on_gpu(t):
    assert tf.DeviceSpec.from_string(t.device).device_type == 'GPU', t.device


def rows(r, n=3):
    return [[float(10 * r + i)] * n for i in range(r + 1)]


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32, tf.int64])
def test_allreduce_eager(dtype):
    size, rank = hvd.size(), hvd.rank()
    with tf.device(gpu()):
        x = on_gpu([rank + 1] * 1000, dtype)
        total = hvd.allreduce(x, op=hvd.Sum, name='sum.%s' % dtype.name)
        biggest = hvd.allreduce(x, op=hvd.Max, name='max.%s' % dtype.name)
    assert_on_gpu(total)
    assert total.dtype == dtype
    np.testing.assert_array_equal(total.numpy().astype(np.float64), size * (size + 1) / 2)
    np.testing.assert_array_equal(biggest.numpy().astype(np.float64), size)


def test_allreduce_average_scaled_and_grouped_in_a_function():
    size, rank = hvd.size(), hvd.rank()

    @tf.function
    def step(a, b):
        avg = hvd.allreduce(a, op=hvd.Average, name='fn.avg')
        scaled = hvd.allreduce(a, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, name='fn.scaled')
        grouped = hvd.grouped_allreduce([a, b], op=hvd.Sum, name='fn.grouped')
        return avg, scaled, grouped

    with tf.device(gpu()):
        a = on_gpu(np.arange(7) + rank)
        b = on_gpu(np.full([3, 2], float(rank)))
        for _ in range(3):
            avg, scaled, (ga, gb) = step(a, b)
    for t in (avg, scaled, ga, gb):
        assert_on_gpu(t)
    base = np.arange(7, dtype=np.float32)
    np.testing.assert_allclose(avg.numpy(), base + (size - 1) / 2)
    np.testing.assert_allclose(scaled.numpy(), size * base + size * (size - 1) / 2)
    np.testing.assert_allclose(ga.numpy(), size * base + size * (size - 1) / 2)
    np.testing.assert_allclose(gb.numpy(), np.full([3, 2], size * (size - 1) / 2))


def test_allgather_ragged_eager_and_in_a_function():
    size, rank = hvd.size(), hvd.rank()
    want = np.array([row for r in range(size) for row in rows(r)], dtype=np.float32)
    with tf.device(gpu()):
        x = on_gpu(rows(rank))
        eager = hvd.allgather(x, name='gather.eager')
        traced = tf.function(lambda t: hvd.allgather(t, name='gather.fn'))(x)
    for t in (eager, traced):
        assert_on_gpu(t)
        np.testing.assert_array_equal(t.numpy(), want)


def test_allgather_outputs_released_while_tensorflow_reads_them():
    # Many engine-allocated outputs, each read back by TensorFlow and dropped at once: each is
    # released only after a device synchronize that follows TensorFlow's read.
    size, rank = hvd.size(), hvd.rank()
    with tf.device(gpu()):
        x = on_gpu([[float(rank)] * 1024] * 64)
        for i in range(20):
            got = hvd.allgather(x, name='gather.many.%d' % i).numpy()
            assert got.shape == (64 * size, 1024)
            assert got[64 * (size - 1), 0] == size - 1


def test_broadcast_alltoall_reducescatter():
    size, rank = hvd.size(), hvd.rank()
    with tf.device(gpu()):
        b = hvd.broadcast(on_gpu([float(rank)] * 5), root_rank=size - 1, name='bcast')
        splits = [p + 1 for p in range(size)]
        send = on_gpu([[100.0 * rank + p] * 2 for p in range(size) for _ in range(p + 1)])
        received, received_splits = hvd.alltoall(send, splits=splits, name='a2a')
        scattered = hvd.reducescatter(on_gpu(np.ones([2 * size + 1, 2])), op=hvd.Sum, name='rs')
    for t in (b, received, scattered):
        assert_on_gpu(t)
    np.testing.assert_array_equal(b.numpy(), size - 1)
    np.testing.assert_array_equal(received_splits.numpy(), [rank + 1] * size)
    np.testing.assert_array_equal(received.numpy(),
                                  [[100.0 * p + rank] * 2 for p in range(size) for _ in range(rank + 1)])
    my_rows = (2 * size + 1) // size + (1 if rank < (2 * size + 1) % size else 0)
    np.testing.assert_array_equal(scattered.numpy(), np.full([my_rows, 2], size))


def test_gradient_tape_reduces_gpu_gradients():
    # DistributedGradientTape with the gradients' allreduce placed on the GPU (TensorFlow's math
    # runs on the CPU here; the reduction on the GPU).
    size, rank = hvd.size(), hvd.rank()
    with tf.device('/CPU:0'):
        w = tf.Variable(tf.ones([4]))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(rank + 1))
        tape = hvd.DistributedGradientTape(tape, device_dense=gpu())
        (grad,) = tape.gradient(loss, [w])
    assert_on_gpu(grad)
    np.testing.assert_allclose(grad.numpy(), (size + 1) / 2)


def test_adasum_on_one_host_is_the_average():
    # GPU Adasum averages inside a host and combines hosts with Adasum (docs/adasum.md): on one
    # host, the ranks' average, eagerly and in a function.
    size, rank = hvd.size(), hvd.rank()
    with tf.device(gpu()):
        x = on_gpu(np.arange(9) * (rank + 1))
        eager = hvd.allreduce(x, op=hvd.Adasum, name='adasum.eager')
        traced = tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum, name='adasum.fn'))(x)
    for t in (eager, traced):
        assert_on_gpu(t)
        np.testing.assert_allclose(t.numpy(), np.arange(9) * (size + 1) / 2, rtol=1e-6)


def test_collectives_ran_on_the_gpu_backend():
    """The GPU kernels ran the collectives above through the path asked for, not TensorFlow's
    CPU placement with copies (that would count them under the cpu backend only)."""
    counts = {}
    for backend, _algorithm, count in _core.engine_counters():
        counts[backend] = counts.get(backend, 0) + count
    want = os.environ.get('HOROVOD_TEST_GPU_BACKEND')
    assert want, 'run by test_gpu_suite.py, which names the backend'
    assert counts.get(want, 0) >= 20, counts
