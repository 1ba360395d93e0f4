"""DLPack capsules over "device" memory, made and read with ctypes (no framework needed).

torch's CPU wheel cannot make a CUDA tensor, so the tests hand horovod._core device tensors the
way a framework would: a DLPack capsule whose DLTensor says kDLCUDA, over memory that the CUDA
runtime in use (the host-memory stand-in in CI, libcudart on a GPU machine) allocated.

- ``DeviceArray(address, shape, dtype, device_id)``: an object with ``__dlpack__`` and
  ``__dlpack_device__`` (what CuPy and JAX arrays offer); ``capsule()`` gives a bare capsule (what
  torch.utils.dlpack.to_dlpack gives). The caller keeps the memory alive.
- ``describe(obj)``: (address, shape, numpy dtype, (device_type, device_id)) of a capsule or of
  any object with ``__dlpack__`` (the core's results).
"""

import ctypes

import numpy as np

KDLCPU = 1
KDLCUDA = 2
KDLCUDAHOST = 3
KDLCUDAMANAGED = 13
KDLVULKAN = 7

_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6


class _DLDevice(ctypes.Structure):
    _fields_ = [('device_type', ctypes.c_int32), ('device_id', ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [('code', ctypes.c_uint8), ('bits', ctypes.c_uint8), ('lanes', ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [('data', ctypes.c_void_p), ('device', _DLDevice), ('ndim', ctypes.c_int32),
                ('dtype', _DLDataType), ('shape', ctypes.POINTER(ctypes.c_int64)),
                ('strides', ctypes.POINTER(ctypes.c_int64)), ('byte_offset', ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [('dl_tensor', _DLTensor), ('manager_ctx', ctypes.c_void_p),
                ('deleter', _DELETER)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]

# Every managed tensor handed out, kept for the life of the process (a few hundred bytes each): a
# consumer may read one long after the DeviceArray that made it is gone. Their deleter is NULL
# (DLPack allows it): a Python callback as deleter would run while the consumer is raising an
# error (an exception set), which Python forbids.
_live = []


def dl_dtype(dtype):
    """numpy dtype (or 'bfloat16') -> (code, bits)."""
    if isinstance(dtype, str) and dtype == 'bfloat16':
        return _BFLOAT, 16
    dt = np.dtype(dtype)
    if dt.name == 'bfloat16':  # ml_dtypes.bfloat16
        return _BFLOAT, 16
    if dt == np.bool_:
        return _BOOL, 8
    code = {'i': _INT, 'u': _UINT, 'f': _FLOAT}[dt.kind]
    return code, dt.itemsize * 8


def np_dtype(code, bits):
    """(code, bits) -> numpy dtype (bfloat16: ml_dtypes')."""
    if code == _BOOL:
        return np.dtype(np.bool_)
    if code == _BFLOAT:
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({_INT: 'i', _UINT: 'u', _FLOAT: 'f'}[code] + str(bits // 8))


class DeviceArray:
    """``shape``/``dtype`` over ``address`` on DLPack device (``device_type``, ``device_id``)."""

    def __init__(self, address, shape, dtype, device_id=0, device_type=KDLCUDA, strides=None):
        self.address = int(address)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.device = (device_type, int(device_id))
        self.strides = strides

    def capsule(self):
        """A fresh, unconsumed "dltensor" capsule over the array."""
        m = _DLManagedTensor()
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = None
        if self.strides is not None:
            strides = (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        t = m.dl_tensor
        t.data = self.address
        t.device = _DLDevice(*self.device)
        t.ndim = ndim
        code, bits = dl_dtype(self.dtype)
        t.dtype = _DLDataType(code, bits, 1)
        t.shape = shape
        t.strides = strides if strides is not None else ctypes.POINTER(ctypes.c_int64)()
        t.byte_offset = 0
        m.deleter = _DELETER()  # NULL
        _live.append((m, shape, strides))
        return _api.PyCapsule_New(ctypes.addressof(m), b'dltensor', None)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.capsule()

    def __dlpack_device__(self):
        return self.device


def describe(obj):
    """(address, shape, dtype, (device_type, device_id)) of a DLPack capsule or exporter."""
    capsule = obj if type(obj).__name__ == 'PyCapsule' else obj.__dlpack__()
    if not _api.PyCapsule_IsValid(capsule, b'dltensor'):
        raise TypeError('not an unconsumed, unversioned DLPack capsule')
    m = _DLManagedTensor.from_address(_api.PyCapsule_GetPointer(capsule, b'dltensor'))
    t = m.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    address = (t.data or 0) + t.byte_offset
    return address, shape, np_dtype(t.dtype.code, t.dtype.bits), (t.device.device_type,
                                                                   t.device.device_id)
