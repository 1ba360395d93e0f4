"""Gradient compression for PyTorch tensors (the shared implementation in horovod.common)."""

import torch

from horovod.common.compression import (Compressor, NoneCompressor, TensorOps,  # noqa: F401
                                        make_compression)


class TorchOps(TensorOps):
    _NAMED = {'float16': torch.float16, 'bfloat16': torch.bfloat16}

    @staticmethod
    def dtype(tensor):
        return tensor.dtype

    @staticmethod
    def is_floating(dtype):
        return dtype.is_floating_point

    @staticmethod
    def cast(tensor, dtype):
        return tensor.to(TorchOps._NAMED.get(dtype, dtype))


Compression = make_compression(TorchOps)
FP16Compressor = Compression.fp16
BF16Compressor = Compression.bf16
