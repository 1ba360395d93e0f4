"""horovod._core's intake of device tensors, in one process (rank 0 of 1), on any build.

What reaches the engine from a DLPack capsule or exporter: the device (kDLCUDA and managed ->
cuda:N, pinned host memory -> the CPU, anything else refused by name), the producer stream (an
int, a callable asked only for device tensors, None) and, on a build where no collective backend
serves CUDA, the engine's refusal naming the device as a ValueError, never a crash. The
collectives themselves on the stand-in: test_collectives.py.
"""

import os

import numpy as np
import pytest

from horovod import _core
from horovod.common.exceptions import HorovodInternalError
from horovod.common.ops import Sum as SUM

from dlpack_device import (KDLCUDA, KDLCUDAHOST, KDLCUDAMANAGED, KDLVULKAN, DeviceArray,
                           describe)

# A machine where no CUDA runtime loads, whatever this one has (read once, at the first device
# tensor): a build with the CUDA backend must then fail the device collective by name.
MISSING_RUNTIME = '/nonexistent/libcudart-for-horovod-tests.so'
os.environ['HOROVOD_CUDA_LIBRARY'] = MISSING_RUNTIME


@pytest.fixture(scope='module', autouse=True)
def core():
    _core.init(None, True)
    yield
    _core.shutdown()


def _no_cuda_backend():
    return not _core.cuda_built()


def host(values, device_type):
    """A DeviceArray over numpy memory marked as `device_type` (kept alive by the caller)."""
    return DeviceArray(values.ctypes.data, values.shape, values.dtype, 0, device_type)


def test_pinned_host_memory_takes_the_cpu_path():
    data = np.arange(6, dtype=np.float32)
    out = np.zeros_like(data)
    work = _core.allreduce_async(host(data, KDLCUDAHOST).capsule(),
                                 host(out, KDLCUDAHOST).capsule(), 'intake.pinned', SUM, 1.0,
                                 1.0, 0)
    work.wait()
    np.testing.assert_array_equal(out, data)


def test_object_exporter_is_read_like_a_capsule():
    data = np.arange(4, dtype=np.int64)
    work = _core.allgather_async(host(data, KDLCUDAHOST), 'intake.exporter', 0)
    work.wait()
    (result,) = work.outputs()
    address, shape, dtype, device = describe(result)
    assert shape == (4,) and dtype == np.int64 and device == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(result), data)


def test_writable_exporter_in_place():
    data = np.arange(5, dtype=np.float64)
    _core.allreduce_async(host(data, KDLCUDAHOST), None, 'intake.inplace', SUM, 2.0, 1.0,
                          0).wait()
    np.testing.assert_array_equal(data, np.arange(5) * 2.0)


def test_unsupported_device_is_refused_by_name():
    data = np.zeros(3, dtype=np.float32)
    with pytest.raises(ValueError, match=r'allreduce: tensor is on vulkan \(DLPack device type '
                                         r'7\), which Horovod does not support'):
        _core.allreduce_async(host(data, KDLVULKAN).capsule(), None, 'intake.vk', SUM, 1.0,
                              1.0, 0)


@pytest.mark.skipif(not _no_cuda_backend(), reason='this build has a CUDA backend')
@pytest.mark.parametrize('device_type', [KDLCUDA, KDLCUDAMANAGED], ids=['cuda', 'managed'])
def test_cuda_tensor_without_a_backend_is_a_clear_error(device_type):
    data = np.zeros(3, dtype=np.float32)
    arr = DeviceArray(data.ctypes.data, data.shape, data.dtype, 1, device_type)
    calls = []

    def stream_of(ordinal):
        calls.append(ordinal)
        return 0x1234

    expected = r'no collective backend in this build runs on cuda:1; move the tensor to the CPU'
    # Every entry point: the fast path (bare capsule), the module functions (capsule, exporter).
    space = _core.HandleSpace(lambda *a: None, 'allreduce.', 'noname.', stream_of)
    with pytest.raises(ValueError, match='Allreduce: ' + expected):
        space.allreduce(arr.capsule(), None, None, 'intake.fast', SUM, 1.0, 1.0, 0)
    assert calls == [1]  # asked once, with the tensor's ordinal
    assert space.pending == 0
    for call in (
            lambda: _core.allreduce_async(arr.capsule(), None, 'i.a', SUM, 1.0, 1.0, 0,
                                          stream=stream_of),
            lambda: _core.grouped_allreduce_async([arr], None, 'i.g', SUM, 1.0, 1.0, 0),
            lambda: _core.allgather_async(arr, 'i.ag', 0, stream=7),
            lambda: _core.grouped_allgather_async([arr.capsule()], 'i.gag', 0),
            lambda: _core.broadcast_async(arr, 0, 'i.b', 0),
            lambda: _core.alltoall_async(arr, None, 'i.a2a', 0),
            lambda: _core.reducescatter_async(arr, arr, 'i.rs', SUM, 1.0, 1.0, 0),
            lambda: _core.grouped_reducescatter_async([arr], [arr], 'i.grs', SUM, 1.0, 1.0, 0)):
        with pytest.raises(ValueError, match=expected):
            call()
    assert calls == [1, 1]
    # The engine still works afterwards.
    ok = np.ones(2, dtype=np.float32)
    _core.allreduce_async(ok, None, 'intake.after', SUM, 1.0, 1.0, 0).wait()
    np.testing.assert_array_equal(ok, [1, 1])


@pytest.mark.skipif(_no_cuda_backend(), reason='this build has no CUDA backend')
def test_cuda_tensor_without_a_runtime_is_a_clear_error():
    data = np.zeros(3, dtype=np.float32)
    arr = DeviceArray(data.ctypes.data, data.shape, data.dtype, 0, KDLCUDA)
    with pytest.raises((ValueError, HorovodInternalError)) as info:
        _core.allreduce_async(arr, None, 'intake.noruntime', SUM, 1.0, 1.0, 0).wait()
    assert MISSING_RUNTIME in str(info.value)
    ok = np.ones(2, dtype=np.float32)  # CPU collectives go on
    _core.allreduce_async(ok, None, 'intake.after.noruntime', SUM, 1.0, 1.0, 0).wait()
    np.testing.assert_array_equal(ok, [1, 1])


def test_cpu_tensors_never_ask_for_a_stream():
    def stream_of(ordinal):
        raise AssertionError('asked for a stream of a CPU tensor')

    data = np.ones(3, dtype=np.float32)
    space = _core.HandleSpace(lambda *a: None, 'allreduce.', 'noname.', stream_of)
    space.synchronize(space.allreduce(data, None, None, 'intake.cpu', SUM, 1.0, 1.0, 0))
    _core.allreduce_async(data, None, 'intake.cpu2', SUM, 1.0, 1.0, 0, stream=stream_of).wait()


def test_bad_stream_is_refused_by_name():
    data = np.zeros(3, dtype=np.float32)
    arr = DeviceArray(data.ctypes.data, data.shape, data.dtype, 0, KDLCUDA)
    with pytest.raises(ValueError, match='stream: expected an int .*got str'):
        _core.allreduce_async(arr, None, 'intake.s', SUM, 1.0, 1.0, 0, stream=lambda i: 'x')
    with pytest.raises(ZeroDivisionError):  # the callable's own error propagates unchanged
        _core.allreduce_async(arr, None, 'intake.s', SUM, 1.0, 1.0, 0, stream=lambda i: 1 // 0)
