"""Gradient compression for JAX arrays (the shared implementation in horovod.common).

``Compression.fp16`` casts floating-point arrays to float16 for the wire. ``Compression.bf16`` is
refused: horovod.jax moves bfloat16 reductions in float32 (see ``horovod.jax.mpi_ops``), so a
bfloat16 cast would lose precision without saving any bytes.
"""

import jax.numpy as jnp
import numpy as np

from horovod.common.compression import (Compressor, NoneCompressor, TensorOps,  # noqa: F401
                                        make_compression)


class JaxOps(TensorOps):
    @staticmethod
    def dtype(tensor):
        return tensor.dtype

    @staticmethod
    def is_floating(dtype):
        return jnp.issubdtype(dtype, jnp.floating)

    @staticmethod
    def cast(tensor, dtype):
        return tensor.astype(np.dtype(dtype) if dtype != 'bfloat16' else jnp.bfloat16)


Compression = make_compression(JaxOps)
FP16Compressor = Compression.fp16


class _RefusedBF16(Compressor):
    @staticmethod
    def compress(tensor):
        raise NotImplementedError('horovod.jax: Compression.bf16 is not supported (bfloat16 '
                                  'reductions travel as float32 here); use Compression.fp16.')

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


Compression.bf16 = _RefusedBF16
