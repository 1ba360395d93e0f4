"""horovod.tensorflow's GPU kernels wait for TensorFlow's GPU producers (under the launcher: two
ranks, each data path, started by test_gpu_suite.py).

TensorFlow waits on the host for its own copies before their consumers run, so a tensor that only
went through copies is never in flight when Horovod gets it. The producer here is a TensorFlow
GPU kernel instead, the stand-in device's HvdStandinGpuScale (tf_standin_gpu.scale): TensorFlow
hands its output on as soon as it is queued on its compute stream. That stream (every stream
TensorFlow made on the rank's GPU) is held back (hvd_standin_gate) while a collective consumes the
output, and released by a helper thread on an event, never a timer: once a host thread waits for
the device's work (hvd_standin_host_waiters: Horovod ordering after it), or once the device is in
error (the stand-in's checker failed a call that was not ordered after it). A collective that does
not order after the producer therefore fails; one that does gets the producer's values.
"""

import ctypes
import os
import threading
import time

import numpy as np
import pytest

tf_standin_gpu = pytest.importorskip('tf_standin_gpu')
GPUS = tf_standin_gpu.load()  # before TensorFlow runs any op

import tensorflow as tf  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402

CUDA_ERROR_NOT_READY = 600
RELEASE_LIMIT = 120  # bounds a failure only (nothing waits for the gate, and no error either)


@pytest.fixture(scope='module', autouse=True)
def horovod():
    hvd.init()
    yield
    hvd.shutdown()


def libraries():
    cuda = ctypes.CDLL(os.environ['HOROVOD_CUDA_LIBRARY'])  # Horovod's and TensorFlow's instance
    cuda.hvd_standin_gate.restype = ctypes.c_void_p
    cuda.hvd_standin_gate.argtypes = [ctypes.c_void_p]
    cuda.hvd_standin_open_gate.argtypes = [ctypes.c_void_p]
    cuda.cudaStreamQuery.argtypes = [ctypes.c_void_p]
    plugin = ctypes.CDLL(tf_standin_gpu.plugin_path())
    plugin.hvd_tf_standin_gpu_streams.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    return cuda, plugin


def ordinal():
    """This rank's GPU: one per rank on the NCCL path, all on GPU 0 on the host-staged path."""
    return hvd.rank() % len(GPUS)


class HeldBack:
    """Holds TensorFlow's streams on this rank's GPU until something waits for them or the device
    is in error; `released_by` says which."""

    def __init__(self):
        self.cuda, plugin = libraries()
        streams = (ctypes.c_void_p * 16)()
        count = min(plugin.hvd_tf_standin_gpu_streams(ordinal(), streams, 16), 16)
        assert count >= 1, 'TensorFlow made no stream on GPU %d' % ordinal()
        self.streams = [streams[i] for i in range(count)]
        self.gates = [self.cuda.hvd_standin_gate(s) for s in self.streams]
        assert all(self.gates)
        self.released_by = None
        self.thread = threading.Thread(target=self._release)
        self.thread.start()

    def _release(self):
        deadline = time.monotonic() + RELEASE_LIMIT
        while self.released_by is None:
            status = self.cuda.cudaStreamQuery(self.streams[0])
            if self.cuda.hvd_standin_host_waiters(ordinal()) > 0:
                self.released_by = 'a wait for the device'
            elif status != CUDA_ERROR_NOT_READY:
                self.released_by = 'CUDA status %d' % status
            elif time.monotonic() > deadline:
                self.released_by = 'nothing within %d s' % RELEASE_LIMIT
            else:
                time.sleep(0.001)
        for gate in self.gates:
            self.cuda.hvd_standin_open_gate(gate)

    def join(self):
        self.thread.join(RELEASE_LIMIT + 10)
        return self.released_by


def inputs():
    size, rank = hvd.size(), hvd.rank()
    with tf.device('/CPU:0'):
        host = tf.constant(np.full(1000, rank + 1, np.float32))
    with tf.device(GPUS[ordinal()]):
        x = tf.identity(host)
    x.numpy()  # TensorFlow has seen the copy complete: only the kernel below is in flight
    return x, 2.0 * size * (size + 1) / 2


def test_allreduce_waits_for_a_pending_tensorflow_kernel_eager():
    x, want = inputs()
    held = HeldBack()
    try:
        with tf.device(GPUS[ordinal()]):
            total = hvd.allreduce(tf_standin_gpu.scale(x, 2.0), op=hvd.Sum, name='ordering.eager')
    finally:
        released_by = held.join()
    assert released_by == 'a wait for the device', released_by
    np.testing.assert_array_equal(total.numpy(), want)


def test_allgather_waits_for_a_pending_tensorflow_kernel_in_a_function():
    x, _ = inputs()

    @tf.function
    def step(a):
        return hvd.allgather(tf_standin_gpu.scale(a, 2.0), name='ordering.function')

    held = HeldBack()
    try:
        with tf.device(GPUS[ordinal()]):
            gathered = step(x)
    finally:
        released_by = held.join()
    assert released_by == 'a wait for the device', released_by
    expected = np.concatenate([np.full(1000, 2.0 * (r + 1), np.float32) for r in range(hvd.size())])
    np.testing.assert_array_equal(gathered.numpy(), expected)
