"""Gradient compression for TensorFlow tensors (the shared implementation in horovod.common)."""

import tensorflow as tf

from horovod.common.compression import (Compressor, NoneCompressor, TensorOps,  # noqa: F401
                                        make_compression)


class TensorFlowOps(TensorOps):
    _NAMED = {'float16': tf.float16, 'bfloat16': tf.bfloat16}

    @staticmethod
    def dtype(tensor):
        return tensor.dtype

    @staticmethod
    def is_floating(dtype):
        return dtype.is_floating

    @staticmethod
    def cast(tensor, dtype):
        return tf.cast(tensor, TensorFlowOps._NAMED.get(dtype, dtype))


Compression = make_compression(TensorFlowOps)
FP16Compressor = Compression.fp16
BF16Compressor = Compression.bf16
