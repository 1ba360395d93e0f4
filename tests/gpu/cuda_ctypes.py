"""The few CUDA runtime calls the GPU tests make themselves, through ctypes.

The library is the one Horovod's loader is pointed at (HOROVOD_CUDA_LIBRARY: the host-memory
stand-in in CI), else the system's libcudart, so that the same tests drive a real GPU. Only
entry points the stand-in implements are used (cuda_api.h's RuntimeApi): cudaMalloc, cudaFree,
cudaMemcpyAsync, cudaMemsetAsync, cudaStreamCreateWithFlags, cudaStreamSynchronize,
cudaStreamDestroy, cudaSetDevice, cudaGetDeviceCount, cudaGetErrorString.
"""

import ctypes
import os

import numpy as np

from dlpack_device import DeviceArray, dl_dtype

H2D, D2H, D2D = 1, 2, 3
NON_BLOCKING = 1


class CudaError(RuntimeError):
    pass


class Cuda:
    def __init__(self, path=None):
        path = path or os.environ.get('HOROVOD_CUDA_LIBRARY') or _find_cudart()
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p
        self.lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        self.lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_int, ctypes.c_void_p]
        self.lib.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                             ctypes.c_void_p]
        self.lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.lib.cudaFree.argtypes = [ctypes.c_void_p]
        self.lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        self.lib.cudaStreamDestroy.argtypes = [ctypes.c_void_p]
        self.lib.cudaStreamCreateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                                       ctypes.c_uint]

    def check(self, status, what):
        if status != 0:
            raise CudaError('%s: %s (%d)' % (what, self.lib.cudaGetErrorString(status).decode(),
                                             status))

    def device_count(self):
        n = ctypes.c_int(0)
        self.check(self.lib.cudaGetDeviceCount(ctypes.byref(n)), 'cudaGetDeviceCount')
        return n.value

    def set_device(self, ordinal):
        self.check(self.lib.cudaSetDevice(ordinal), 'cudaSetDevice(%d)' % ordinal)

    def malloc(self, nbytes):
        p = ctypes.c_void_p()
        self.check(self.lib.cudaMalloc(ctypes.byref(p), max(int(nbytes), 1)), 'cudaMalloc')
        return p.value

    def free(self, address):
        self.check(self.lib.cudaFree(address), 'cudaFree')

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.lib.cudaStreamCreateWithFlags(ctypes.byref(s), NON_BLOCKING),
                   'cudaStreamCreateWithFlags')
        return s.value or 0

    def destroy_stream(self, stream):
        self.check(self.lib.cudaStreamDestroy(stream), 'cudaStreamDestroy')

    def sync(self, stream=0):
        self.check(self.lib.cudaStreamSynchronize(stream or None), 'cudaStreamSynchronize')

    def copy(self, dst, src, nbytes, kind, stream=0):
        if nbytes:
            self.check(self.lib.cudaMemcpyAsync(dst, src, nbytes, kind, stream or None),
                       'cudaMemcpyAsync')

    def memset(self, address, byte, nbytes, stream=0):
        self.check(self.lib.cudaMemsetAsync(address, byte, nbytes, stream or None),
                   'cudaMemsetAsync')


class DeviceTensor(DeviceArray):
    """A device allocation of ``shape``/``dtype`` (numpy dtype) on ``ordinal``, freed by
    ``free()``. ``upload``/``download`` copy on ``stream`` (0: the default stream)."""

    def __init__(self, cuda, shape, dtype, ordinal=0):
        self.cuda = cuda
        self.np_dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * self.np_dtype.itemsize
        dl_dtype(self.np_dtype)  # refuses dtypes DLPack cannot name
        super().__init__(cuda.malloc(self.nbytes), shape, self.np_dtype, ordinal)

    @classmethod
    def of(cls, cuda, values, ordinal=0, stream=0, sync=True):
        values = np.ascontiguousarray(values)
        t = cls(cuda, values.shape, values.dtype, ordinal)
        t.upload(values, stream, sync)
        return t

    def upload(self, values, stream=0, sync=True):
        values = np.ascontiguousarray(values, dtype=self.np_dtype)
        self._pending = values  # the host side must outlive an asynchronous copy
        self.cuda.copy(self.address, values.ctypes.data, self.nbytes, H2D, stream)
        if sync:
            self.cuda.sync(stream)

    def download(self, stream=0):
        out = np.empty(self.shape, dtype=self.np_dtype)
        self.cuda.copy(out.ctypes.data, self.address, self.nbytes, D2H, stream)
        self.cuda.sync(stream)
        return out

    def free(self):
        if self.address:
            self.cuda.free(self.address)
            self.address = 0


def download(cuda, address, shape, dtype):
    """A numpy copy of device memory at ``address`` (an engine-allocated result)."""
    out = np.empty(shape, dtype=dtype)
    cuda.copy(out.ctypes.data, address, out.nbytes, D2H)
    cuda.sync()
    return out


def _find_cudart():
    for name in ('libcudart.so.13', 'libcudart.so.12', 'libcudart.so'):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            pass
    try:  # the nvidia-cuda-runtime wheel torch's CUDA builds depend on
        import nvidia.cuda_runtime as runtime
        lib = os.path.join(list(runtime.__path__)[0], 'lib')
        for f in sorted(os.listdir(lib)):
            if f.startswith('libcudart.so'):
                return os.path.join(lib, f)
    except ImportError:
        pass
    raise OSError('no CUDA runtime: set HOROVOD_CUDA_LIBRARY or install libcudart')
