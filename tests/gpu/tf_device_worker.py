"""TensorFlow on the stand-in GPU device, in a process of its own: test_tf_device.py runs
``python tf_device_worker.py <scenario>`` and checks the JSON line it prints last and its stderr
(where every error the stand-in detects appears as an ``hvd-cuda-standin:`` line).

Scenarios:
  roundtrip  CPU -> GPU -> CPU copies (tf.identity) for several dtypes and shapes, eager and in
             tf.function, GPU:0 -> GPU:1, the plugin's GPU kernel (tf_standin_gpu.scale), and an op
             without a GPU kernel under soft placement.
  race       a copy of our own that reads a TF GPU tensor's memory while TF's copy filling it is
             held back (hvd_standin_gate), not ordered after it: the stand-in must report it.
  kernel_race  the same for the output of a TF GPU kernel (the plugin's HvdStandinGpuScale),
             which TF considers ready as soon as the kernel is queued on its compute stream.
"""

import ctypes
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tf_standin_gpu  # noqa: E402

DEVICES = tf_standin_gpu.load()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from cuda_ctypes import D2H, Cuda  # noqa: E402
from dlpack_device import describe  # noqa: E402

PLUGIN = ctypes.CDLL(tf_standin_gpu.plugin_path())  # the instance TensorFlow loaded
PLUGIN.hvd_tf_standin_gpu_streams.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
PLUGIN.hvd_tf_standin_gpu_last_scale.restype = ctypes.c_uint64
PLUGIN.hvd_tf_standin_gpu_last_scale.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                                  ctypes.POINTER(ctypes.c_uint64)]
PLUGIN.hvd_tf_standin_gpu_last_copy.restype = ctypes.c_uint64
PLUGIN.hvd_tf_standin_gpu_last_copy.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                                 ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint64)]


def copies_queued(device):
    """(how many async copies TF queued on `device`, the last one's destination and size)."""
    dst, nbytes = ctypes.c_void_p(), ctypes.c_uint64()
    count = PLUGIN.hvd_tf_standin_gpu_last_copy(device, ctypes.byref(dst), None, ctypes.byref(nbytes))
    return count, dst.value, nbytes.value


def source_arrays():
    rng = np.random.default_rng(7)
    bf16 = tf.bfloat16.as_numpy_dtype
    return {
        'float32': rng.standard_normal((5, 3)).astype(np.float32),
        'float16': rng.standard_normal((4, 6)).astype(np.float16),
        'bfloat16': rng.standard_normal((7,)).astype(np.float32).astype(bf16),
        'int32': rng.integers(-2**31, 2**31 - 1, (3, 3), dtype=np.int32),
        'int64': rng.integers(-2**62, 2**62, (9,), dtype=np.int64),
        'bool': rng.integers(0, 2, (2, 5)).astype(np.bool_),
        'scalar': np.float32(3.25),
        'empty': np.zeros((0, 4), np.float32),
        '64MiB': np.arange(16 << 20, dtype=np.float32),
    }


def on_cpu(array):
    """A CPU tensor (eager tf.constant would put it on GPU:0, copying it there)."""
    with tf.device('/CPU:0'):
        return tf.constant(array)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def roundtrip():
    results = {'devices': DEVICES}

    @tf.function(reduce_retracing=False)
    def to_gpu(x):
        with tf.device('/GPU:0'):
            return tf.identity(x)

    @tf.function(reduce_retracing=False)
    def to_cpu(x):
        with tf.device('/CPU:0'):
            return tf.identity(x)

    # `copies`: the asynchronous copies TF queued on GPU:0's streams for the round trip (int32
    # tensors of a "GPU" device live in host memory, as on TensorFlow's CUDA device: none).
    for name, array in source_arrays().items():
        cpu = on_cpu(array)
        for mode, there, back in (('eager', tf.identity, tf.identity), ('function', to_gpu, to_cpu)):
            before = copies_queued(0)[0]
            with tf.device('/GPU:0'):
                gpu = there(cpu)
            with tf.device('/CPU:0'):
                host = back(gpu)
            equal = same(host.numpy(), array)
            results[mode + '/' + name] = {'gpu_device': gpu.device, 'back_device': host.device, 'equal': equal,
                                          'copies': copies_queued(0)[0] - before}

    @tf.function(reduce_retracing=False)
    def scaled_in_function(x):
        with tf.device('/GPU:0'):
            return tf_standin_gpu.scale(tf.identity(x), -1.5)

    # The plugin's GPU kernel: eager and in a tf.function, for each float type it takes.
    for name in ('float32', 'float16', 'bfloat16'):
        array = source_arrays()[name]
        with tf.device('/GPU:0'):
            eager = tf_standin_gpu.scale(tf.identity(on_cpu(array)), -1.5)
        function = scaled_in_function(on_cpu(array))
        want = (array.astype(np.float32) * -1.5).astype(array.dtype)
        results['scale/' + name] = {'devices': [eager.device, function.device],
                                    'equal': [same(eager.numpy(), want), same(function.numpy(), want)]}

    array = source_arrays()['float32']
    with tf.device('/GPU:1'):
        on1 = tf_standin_gpu.scale(tf.identity(on_cpu(array)), 4.0)
    results['scale/gpu1'] = {'devices': [on1.device], 'equal': [same(on1.numpy(), array * 4)]}

    with tf.device('/GPU:0'):
        on0 = tf.identity(on_cpu(array))
    with tf.device('/GPU:1'):
        on1 = tf.identity(on0)
    results['gpu0_to_gpu1'] = {'gpu_device': on1.device, 'equal': same(on1.numpy(), array)}

    # NthElement has a CPU kernel only: soft placement runs it on the CPU, strict placement
    # refuses it.
    expected = np.sort(array, axis=-1)[..., 0]
    with tf.device('/GPU:0'):
        smallest = tf.raw_ops.NthElement(input=on0, n=0)
    results['soft_placement'] = {'device': smallest.device, 'equal': same(smallest.numpy(), expected)}
    tf.config.set_soft_device_placement(False)
    try:
        with tf.device('/GPU:0'):
            strict = tf.raw_ops.NthElement(input=on0, n=0)
        results['strict_placement'] = {'raised': False, 'device': strict.device}
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
        results['strict_placement'] = {'raised': True, 'message': str(e)[:400]}
    finally:
        tf.config.set_soft_device_placement(True)
    # AddV2: a TensorFlow built with CUDA registers a CUDA kernel for "GPU", which cannot launch on
    # this device and must fail loudly; one built without CUDA has none (soft placement: the CPU).
    try:
        with tf.device('/GPU:0'):
            total = on0 + on0
        results['cuda_kernel'] = {'raised': False, 'device': total.device,
                                  'equal': same(total.numpy(), array + array)}
    except tf.errors.OpError as e:
        results['cuda_kernel'] = {'raised': True, 'message': str(e)[:400]}
    return results


def wait_until(predicate, what, limit=60.0):
    """Polls an event (never a duration): `limit` only bounds a failure."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError('timed out waiting for ' + what)
        time.sleep(0.001)


def race():
    cuda = Cuda(os.environ['HOROVOD_CUDA_LIBRARY'])  # the same library, so the same instance
    lib = cuda.lib
    lib.hvd_standin_gate.restype = ctypes.c_void_p
    lib.hvd_standin_gate.argtypes = [ctypes.c_void_p]
    lib.hvd_standin_open_gate.argtypes = [ctypes.c_void_p]
    array = np.arange(1 << 16, dtype=np.float32)
    with tf.device('/GPU:0'):
        tf.identity(on_cpu(array + 1)).numpy()  # warm: TF's streams and first memory region exist
    # A tensor TF never copied: it keeps the copy of a CPU tensor on each device it went to (a
    # mirror), and would not copy that one again.
    cpu = on_cpu(array)

    streams = (ctypes.c_void_p * 16)()
    count = PLUGIN.hvd_tf_standin_gpu_streams(0, streams, 16)
    gates = [lib.hvd_standin_gate(streams[i]) for i in range(min(count, 16))]
    before = copies_queued(0)[0]
    produced = {}

    def produce():
        with tf.device('/GPU:0'):
            produced['tensor'] = tf.identity(cpu)  # returns once the gated copy ran

    producer = threading.Thread(target=produce)
    producer.start()
    wait_until(lambda: copies_queued(0)[0] > before, "TensorFlow's copy to GPU:0 to be queued")
    _, dst, nbytes = copies_queued(0)
    # Our copy reads that memory on a non-blocking stream of device 1, with no wait on TF's
    # stream. (Device 1: the context that gets the sticky error is not the one TF is using, so TF
    # finishes its copy afterwards; on device 0 TF would stop at its next event poll.)
    cuda.set_device(1)
    ours = cuda.stream()
    out = np.zeros_like(array)
    racy_status = lib.cudaMemcpyAsync(out.ctypes.data, dst, nbytes, D2H, ours)
    lib.hvd_standin_clear_errors()
    for gate in gates:
        lib.hvd_standin_open_gate(gate)
    producer.join(60)
    tensor = produced.get('tensor')
    result = {'streams': count, 'gated': sum(1 for g in gates if g), 'racy_status': racy_status,
              'producer_done': tensor is not None}
    if tensor is not None:
        address = describe(tf.experimental.dlpack.to_dlpack(tensor))[0]
        result['tensor_is_the_copied_memory'] = address == dst and nbytes == array.nbytes
        result['tensor_equal'] = same(tensor.numpy(), array)
        # TF saw its copy complete (its event poll): the same read is ordered now.
        result['ordered_status'] = lib.cudaMemcpyAsync(out.ctypes.data, dst, nbytes, D2H, ours)
        cuda.sync(ours)
        result['ordered_equal'] = same(out, array)
    return result


def kernel_race():
    """A read of HvdStandinGpuScale's output (written on TF's compute stream, held back by a gate)
    from a stream of our own that does not wait for TF's streams: an ordering error."""
    cuda = Cuda(os.environ['HOROVOD_CUDA_LIBRARY'])
    lib = cuda.lib
    lib.hvd_standin_gate.restype = ctypes.c_void_p
    lib.hvd_standin_gate.argtypes = [ctypes.c_void_p]
    lib.hvd_standin_open_gate.argtypes = [ctypes.c_void_p]
    array = np.arange(1 << 12, dtype=np.float32)
    with tf.device('/GPU:0'):
        source = tf.identity(on_cpu(array))
        source.numpy()  # TF has seen the copy complete
    streams = (ctypes.c_void_p * 16)()
    count = PLUGIN.hvd_tf_standin_gpu_streams(0, streams, 16)
    gates = [lib.hvd_standin_gate(streams[i]) for i in range(min(count, 16))]
    before = PLUGIN.hvd_tf_standin_gpu_last_scale(0, None, None)
    with tf.device('/GPU:0'):
        doubled = tf_standin_gpu.scale(source, 2.0)  # queued behind the gate; TF does not wait
    address, nbytes = ctypes.c_void_p(), ctypes.c_uint64()
    ran = PLUGIN.hvd_tf_standin_gpu_last_scale(0, ctypes.byref(address), ctypes.byref(nbytes)) - before
    address = address.value
    cuda.set_device(1)
    ours = cuda.stream()
    out = np.zeros_like(array)
    result = {'gated': sum(1 for g in gates if g), 'streams': count,
              'racy_status': lib.cudaMemcpyAsync(out.ctypes.data, address, array.nbytes, D2H, ours)}
    lib.hvd_standin_clear_errors()
    for gate in gates:
        lib.hvd_standin_open_gate(gate)
    result['kernels_ran'] = ran
    result['equal'] = same(doubled.numpy(), array * 2)  # an eager copy off the GPU: a device sync
    result['output_is_the_read_memory'] = (describe(tf.experimental.dlpack.to_dlpack(doubled))[0] == address
                                           and nbytes.value == array.nbytes)
    result['ordered_status'] = lib.cudaMemcpyAsync(out.ctypes.data, address, array.nbytes, D2H, ours)
    cuda.sync(ours)
    result['ordered_equal'] = same(out, array * 2)
    return result


if __name__ == '__main__':
    scenario = {'roundtrip': roundtrip, 'race': race, 'kernel_race': kernel_race}[sys.argv[1]]
    print(json.dumps(scenario()), flush=True)
