"""Gradient compression on Keras 3 tensors of any backend (``keras.ops`` casts, which also work
inside compiled train steps), from the shared implementation in horovod.common."""

from horovod.common.compression import (Compressor, NoneCompressor, TensorOps,  # noqa: F401
                                        make_compression)


class KerasOps(TensorOps):
    @staticmethod
    def dtype(tensor):
        import keras
        return keras.backend.standardize_dtype(tensor.dtype)

    @staticmethod
    def is_floating(dtype):
        return 'float' in str(dtype)

    @staticmethod
    def cast(tensor, dtype):
        import keras
        return keras.ops.cast(tensor, dtype)


Compression = make_compression(KerasOps)
