"""Gradient compression for TensorFlow tensors (the shared implementations in horovod.common):
Horovod's ``Compression`` (none, fp16, bf16) and the error-feedback compressors ``PowerSGD`` and
``Int8Quantizer`` (see docs/compression.md)."""

import tensorflow as tf

from horovod.common.compression import (Compressor, NoneCompressor, TensorOps,  # noqa: F401
                                        make_compression)
from horovod.common.error_feedback import (ErrorFeedbackCompressor, FrameworkOps,  # noqa: F401
                                           Int8QuantizerBase, PowerSGDBase)


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


class _TensorFlowEFOps(FrameworkOps):
    """TensorFlow, eager or in graphs: slots are non-trainable ``tf.Variable``s (created under
    ``tf.init_scope``, so also from inside a ``tf.function``), and outputs carry control
    dependencies on the slot writes so that a graph runs them."""

    def shape(self, t):
        return tuple(int(d) for d in t.shape)

    def compute(self, t):
        if t.dtype in (tf.float16, tf.bfloat16):
            return tf.cast(t, tf.float32)
        return t

    def cast_like(self, t, like):
        return tf.cast(t, like.dtype)

    def reshape(self, t, shape):
        return tf.reshape(t, shape)

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        return tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)

    def orthonormalize(self, p):
        return tf.linalg.qr(p, full_matrices=False)[0]

    def zeros(self, shape, like):
        return tf.zeros(shape, dtype=like.dtype)

    def randn(self, shape, seed, like):
        return tf.random.stateless_normal(shape, seed=[seed % (2 ** 31), 0], dtype=like.dtype)

    def abs_max_all(self, tensors):
        return tf.stack([tf.reduce_max(tf.abs(t)) if t.shape.num_elements()
                         else tf.zeros((), t.dtype) for t in tensors])

    def quantize(self, t, scale, levels):
        qf = tf.clip_by_value(tf.round(t / scale), -float(levels), float(levels))
        return tf.cast(qf, tf.int8), qf

    def dequantize(self, q, scale, like):
        return tf.cast(q, like.dtype) * scale

    def element(self, vector, i):
        return vector[i]

    def safe_scale(self, amax, levels):
        return tf.where(amax > 0, amax / levels, tf.ones_like(amax))

    def slot(self, init):
        with tf.init_scope():
            return tf.Variable(init(), trainable=False, name='horovod_error_feedback')

    def read(self, slot):
        return slot.read_value()

    def write(self, slot, value):
        return slot.assign(value)

    def after(self, outputs, tokens):
        tokens = [t for t in tokens if t is not None]
        if tf.executing_eagerly() or not tokens:
            return outputs
        with tf.control_dependencies(tokens):
            return [tf.identity(o) for o in outputs]

    def counter(self):
        return tf.zeros((), tf.int64)

    def below(self, counter_value, limit):
        return counter_value < limit

    def cond(self, pred, true_fn, false_fn):
        return tf.cond(pred, true_fn, false_fn)


_OPS = _TensorFlowEFOps()


class PowerSGD(PowerSGDBase):
    """PowerSGD with error feedback for ``hvd.DistributedGradientTape`` and the legacy
    ``hvd.DistributedOptimizer`` (``compression=hvd.PowerSGD(rank=...)``). Its state (residuals,
    Q, step: ``variables()``) lives in this object; keep one instance per model and pass it to
    the elastic state (``TensorFlowKerasState(..., compression=it)``) to commit and restore it.
    Arguments as ``horovod.torch.PowerSGD``."""
    _ops = _OPS

    def variables(self):
        return [slot for _, _, slot in self.state_items()]


class Int8Quantizer(Int8QuantizerBase):
    """Int8 quantization with a shared scale and error feedback (see PowerSGD for its use)."""
    _ops = _OPS

    def variables(self):
        return [slot for _, _, slot in self.state_items()]
