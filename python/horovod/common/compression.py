"""Gradient compression, written once for every framework.

A framework adapter supplies a tiny ``TensorOps`` object (is this tensor floating point, what is
its dtype, cast it) and gets a ``Compression`` namespace with ``none``, ``fp16`` and ``bf16``
compressors via :func:`make_compression`. Compressors are used as classes, Horovod style:
``tensor, ctx = Compression.fp16.compress(t)`` ... ``Compression.fp16.decompress(tensor, ctx)``.
"""


class TensorOps:
    """What a compressor needs from a framework. Adapters subclass and fill these in."""

    @staticmethod
    def dtype(tensor):
        raise NotImplementedError

    @staticmethod
    def is_floating(dtype):
        raise NotImplementedError

    @staticmethod
    def cast(tensor, dtype_name_or_dtype):
        """Casts to a dtype given as the framework's dtype object or a name
        ('float16', 'bfloat16')."""
        raise NotImplementedError


class Compressor:
    """Interface for compressing and decompressing a given tensor."""

    @staticmethod
    def compress(tensor):
        """Compresses a tensor and returns it with any context needed to decompress it."""
        pass

    @staticmethod
    def decompress(tensor, ctx):
        """Decompresses the tensor with the given context."""
        pass


class NoneCompressor(Compressor):
    """Default no-op compression."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Casts floating-point tensors to ``_target`` for the wire and back afterwards; other dtypes
    pass through unchanged."""
    _ops = None
    _target = None

    @classmethod
    def compress(cls, tensor):
        dtype = cls._ops.dtype(tensor)
        compressed = tensor
        if cls._ops.is_floating(dtype):
            compressed = cls._ops.cast(tensor, cls._target)
        return compressed, dtype

    @classmethod
    def decompress(cls, tensor, ctx):
        dtype = ctx
        if dtype is not None and cls._ops.is_floating(dtype):
            return cls._ops.cast(tensor, dtype)
        return tensor


def make_compression(ops):
    """Builds the ``Compression`` namespace (none, fp16, bf16) for a framework's TensorOps."""

    class FP16Compressor(_CastCompressor):
        """Compress all floating point gradients to 16-bit."""
        _ops = ops
        _target = 'float16'

    class BF16Compressor(_CastCompressor):
        """Compress all floating point gradients to bfloat16."""
        _ops = ops
        _target = 'bfloat16'

    class Compression:
        """Optional gradient compression algorithm used during allreduce."""

        """Do not compress the gradients. This is the default."""
        none = NoneCompressor

        """Compress all floating point gradients to 16-bit."""
        fp16 = FP16Compressor

        """Compress all floating point gradients to bfloat16."""
        bf16 = BF16Compressor

    return Compression
