"""Gradient compression for MXNet NDArrays (the shared implementation in horovod.common)."""

import numpy as np

from horovod.common.compression import (Compressor, NoneCompressor, TensorOps,  # noqa: F401
                                        make_compression)


class MXNetOps(TensorOps):
    @staticmethod
    def dtype(tensor):
        return np.dtype(tensor.dtype)

    @staticmethod
    def is_floating(dtype):
        return np.issubdtype(dtype, np.floating)

    @staticmethod
    def cast(tensor, dtype):
        if dtype == 'bfloat16':
            raise NotImplementedError('MXNet NDArrays have no bfloat16 type; use '
                                      'Compression.fp16.')
        return tensor.astype(dtype)


Compression = make_compression(MXNetOps)
FP16Compressor = Compression.fp16
