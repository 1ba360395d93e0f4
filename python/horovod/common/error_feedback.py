"""Compressors with error feedback, written once for every framework: PowerSGD and an int8
quantizer.

Unlike Horovod's ``Compression.fp16`` (a cast around each allreduce), these compress a whole
step's gradients at once, run their own collectives (PowerSGD needs two rounds with math in
between) and keep state across steps: per gradient, the error-feedback residual (what was not
sent yet, added to the next step's gradient) and, for PowerSGD, the warm-started ``Q``.

Contract with the gradient wrappers (torch ``DistributedOptimizer``, TensorFlow's
``DistributedOptimizer`` / ``DistributedGradientTape``):

- ``compressor.reduce(grads, keys, comm)`` takes every dense gradient of the step, in an order
  every rank agrees on, with ``keys`` (hashable, stable across steps: a parameter, a variable
  reference) naming each gradient's state, and returns the averaged approximations (same shapes
  and dtypes). ``comm`` is a ``Comm``: its ``allreduce(tensors, op, tag)`` is one grouped
  allreduce over the process set (op 'average', 'sum' or 'max'; ``tag`` names it), ``size`` is
  the set size.
- Every rank must call ``reduce`` with the same gradient shapes in the same order each step.
- One compressor instance serves one model: its state is keyed by parameter.

The framework adapter is a ``FrameworkOps`` subclass (torch and TensorFlow tensors); state lives
in "slots" it creates (a tensor in torch, a ``tf.Variable`` in TensorFlow).
"""

import numbers

from horovod.common.compression import Compressor

_STEP = '__step__'


class Comm:
    """What a compressor needs from the wrapper: grouped allreduces over the process set."""

    def __init__(self, allreduce, size):
        self.allreduce = allreduce  # (tensors, op in 'average'|'sum'|'max', tag) -> tensors
        self.size = size


class FrameworkOps:
    """Tensor operations the compressors use. Adapters fill these in."""

    def shape(self, t):
        """Static shape as a tuple of ints."""
        raise NotImplementedError

    def compute(self, t):
        """``t`` in the dtype the math runs in (float32 for 16-bit floats, else unchanged)."""
        raise NotImplementedError

    def cast_like(self, t, like):
        raise NotImplementedError

    def reshape(self, t, shape):
        raise NotImplementedError

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        raise NotImplementedError

    def orthonormalize(self, p):
        """An orthonormal basis of the columns of ``p`` (rows x r), rows x r; deterministic, so
        that every rank computes the same one from the same input."""
        raise NotImplementedError

    def zeros(self, shape, like):
        raise NotImplementedError

    def randn(self, shape, seed, like):
        """Standard normal values from ``seed`` alone (the same on every rank)."""
        raise NotImplementedError

    def abs_max_all(self, tensors):
        """1-D tensor: max |t| of each tensor."""
        raise NotImplementedError

    def quantize(self, t, scale, levels):
        """(int8 tensor, its value as float): round(t / scale) clipped to [-levels, levels]."""
        raise NotImplementedError

    def dequantize(self, q, scale, like):
        raise NotImplementedError

    def element(self, vector, i):
        raise NotImplementedError

    def safe_scale(self, amax, levels):
        """amax / levels where amax > 0, else 1 (an all-zero tensor)."""
        raise NotImplementedError

    # ---- state ----------------------------------------------------------------------------------

    def slot(self, init):
        """New state holding ``init()`` (called where variables can be created)."""
        raise NotImplementedError

    def read(self, slot):
        raise NotImplementedError

    def write(self, slot, value):
        """Stores ``value``; returns a token for ``after`` (or None)."""
        raise NotImplementedError

    def accumulate(self, slot, value):
        """slot + value: M, what is compressed. May update ``slot`` in place and return it (M is
        then only read until the residual is stored from it)."""
        return self.read(slot) + value

    def subtract_product(self, slot, m, p, q, approx):
        """Stores M - P Q^T (``approx`` = P Q^T, computed already) as the residual."""
        return self.write(slot, m - approx)

    def subtract_scaled(self, slot, m, qf, scale):
        """Stores M - qf * scale as the residual."""
        return self.write(slot, m - qf * scale)

    def after(self, outputs, tokens):
        """``outputs`` ordered after the writes ``tokens`` (graph mode); eager: unchanged."""
        return outputs

    def counter(self):
        """The initial value (0) of an integer step counter slot."""
        raise NotImplementedError

    def below(self, counter_value, limit):
        """counter_value < limit, as a Python bool or a boolean tensor for ``cond``."""
        raise NotImplementedError

    def cond(self, pred, true_fn, false_fn):
        raise NotImplementedError


class ErrorFeedbackCompressor(Compressor):
    """Base of the stateful compressors; ``_ops`` is set by the framework subclass."""
    _ops = None

    def __init__(self):
        self._slots = {}     # key -> {slot name: slot}
        self._order = []     # keys in creation order (seeds derive from the position)
        self._position = {}  # key -> index in _order
        self._pending = {}   # (position, slot name) -> initial value of a slot not created yet

    # Horovod's per-tensor interface cannot carry these compressors.
    def compress(self, tensor):
        raise TypeError('{} compresses a whole step of gradients with state kept across steps; '
                        'use it as compression= of DistributedOptimizer or '
                        'DistributedGradientTape, not of a single collective.'
                        .format(type(self).__name__))

    def decompress(self, tensor, ctx):
        raise TypeError('{}.decompress: see compress()'.format(type(self).__name__))

    def reduce(self, grads, keys, comm):
        raise NotImplementedError

    # ---- state access for optimizers and elastic state ------------------------------------------

    def state_items(self):
        """[(key, slot name, slot)] in creation order."""
        return [(k, n, s) for k in self._order for n, s in sorted(self._slots[k].items())]

    def positioned_items(self):
        """[(position, slot name, slot)]: the same on every rank for the same gradients."""
        return [(self._position[k], n, s) for k, n, s in self.state_items()]

    def set_pending(self, values):
        """{(position, slot name): value}: initial values for slots created later (state
        received before this rank has run a step)."""
        self._pending.update(values)

    def local_slot_names(self):
        """Slot names that differ between ranks (the residuals); the others must agree."""
        return ('residual',)

    def _slots_for(self, key, init):
        """The slots of ``key``, creating those missing from ``init(position)`` ({slot name:
        function returning the initial value}; position: the key's creation index)."""
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = {}
            self._position[key] = len(self._order)
            self._order.append(key)
        position = self._position[key]
        for name, fn in init(position).items():
            if name not in slots:
                pending = self._pending.pop((position, name), None)
                if pending is not None:
                    def fn(value=pending):
                        return value
                slots[name] = self._ops.slot(fn)
        return slots

    def adopt_slot(self, key, name, slot):
        """Installs a slot (loading saved state into a compressor that has none yet)."""
        if key not in self._slots:
            self._slots[key] = {}
            self._position[key] = len(self._order)
            self._order.append(key)
        self._slots[key][name] = slot


class PowerSGDBase(ErrorFeedbackCompressor):
    """PowerSGD (Vogels et al., 2019): each gradient matrix M (a gradient reshaped to
    ``shape[0] x rest``) plus its residual is approximated as P Q^T with one power iteration from
    last step's Q: P = M Q, averaged (one grouped allreduce of every P, with the uncompressed
    gradients fused into it), orthonormalized; Q = M^T P, averaged (one grouped allreduce of
    every Q). The residual keeps M - P Q^T. Gradients with fewer than two dimensions, or where
    rank-r factors would not be ``min_compression_rate`` times smaller, are averaged exactly.
    The first ``start_iter`` steps average every gradient exactly (no residual)."""

    def __init__(self, rank=1, start_iter=0, min_compression_rate=2.0, seed=0):
        super().__init__()
        if not isinstance(rank, numbers.Integral) or isinstance(rank, bool) or rank < 1:
            raise ValueError('PowerSGD rank must be an integer >= 1, got {!r}'.format(rank))
        if not isinstance(start_iter, numbers.Integral) or start_iter < 0:
            raise ValueError('PowerSGD start_iter must be an integer >= 0, got {!r}'
                             .format(start_iter))
        if min_compression_rate < 1:
            raise ValueError('PowerSGD min_compression_rate must be >= 1, got {!r}'
                             .format(min_compression_rate))
        self.rank = int(rank)
        self.start_iter = int(start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.seed = int(seed)

    def __repr__(self):
        return 'PowerSGD(rank={}, start_iter={})'.format(self.rank, self.start_iter)

    def plan(self, shape):
        """(rows, cols, r) when a gradient of ``shape`` is compressed, else None."""
        if len(shape) < 2:
            return None
        rows = shape[0]
        cols = 1
        for d in shape[1:]:
            cols *= d
        r = min(self.rank, rows, cols)
        if rows * cols < (rows + cols) * r * self.min_compression_rate:
            return None
        return rows, cols, r

    def _ensure_state(self, grads, keys):
        ops = self._ops
        self._slots_for(_STEP, lambda _: {'step': ops.counter})
        plans = []
        for g, key in zip(grads, keys):
            plan = self.plan(ops.shape(g))
            plans.append(plan)
            if plan is None:
                continue
            rows, cols, r = plan
            c = ops.compute(g)

            def init(position, rows=rows, cols=cols, r=r, c=c):
                return {'residual': lambda: ops.zeros((rows, cols), c),
                        'q': lambda: ops.randn((cols, r), self.seed * 1000003 + position, c)}
            self._slots_for(key, init)
        return plans

    def reduce(self, grads, keys, comm):
        ops = self._ops
        plans = self._ensure_state(grads, keys)
        step_slot = self._slots[_STEP]['step']
        step = ops.read(step_slot)
        tokens = [ops.write(step_slot, step + 1)]

        def exact():
            return comm.allreduce(list(grads), 'average', 'powersgd.exact')

        def compressed():
            return self._compressed(grads, keys, plans, comm)

        if self.start_iter > 0:
            out = ops.cond(ops.below(step, self.start_iter), exact, compressed)
        else:
            out = compressed()
        return ops.after(list(out), tokens)

    def _compressed(self, grads, keys, plans, comm):
        ops = self._ops
        comp = [i for i, p in enumerate(plans) if p is not None]
        exact = [i for i, p in enumerate(plans) if p is None]
        ms, ps = [], []
        for i in comp:
            rows, cols, _ = plans[i]
            slots = self._slots[keys[i]]
            m = ops.accumulate(slots['residual'], ops.reshape(ops.compute(grads[i]), (rows, cols)))
            ms.append(m)
            ps.append(ops.matmul(m, ops.read(slots['q'])))
        reduced = comm.allreduce(ps + [grads[i] for i in exact], 'average', 'powersgd.p')
        out = list(grads)
        for j, i in enumerate(exact):
            out[i] = reduced[len(ps) + j]
        if not comp:
            return out
        p_hats = [ops.orthonormalize(p) for p in reduced[:len(ps)]]
        qs = [ops.matmul(m, p, transpose_a=True) for m, p in zip(ms, p_hats)]
        qs = comm.allreduce(qs, 'average', 'powersgd.q')
        tokens = []
        for i, m, p, q in zip(comp, ms, p_hats, qs):
            slots = self._slots[keys[i]]
            approx = ops.matmul(p, q, transpose_b=True)
            tokens.append(ops.subtract_product(slots['residual'], m, p, q, approx))
            tokens.append(ops.write(slots['q'], q))
            out[i] = ops.cast_like(ops.reshape(approx, ops.shape(grads[i])), grads[i])
        return ops.after(out, tokens)


class Int8QuantizerBase(ErrorFeedbackCompressor):
    """Int8 quantization with a scale shared by every rank, and error feedback. Per gradient,
    M = gradient + residual; one grouped allreduce (max) of every tensor's max |M| gives the
    shared scale s = max / L with L = floor(127 / ranks) levels, so that the sum of every rank's
    int8 values fits int8; each rank sends round(M / s) clipped to [-L, L] in one grouped int8
    sum and keeps M - s * round(M / s) as its residual. The average is s * sum / ranks.
    Fewer ranks, finer levels: 63 at 2 ranks, 31 at 4; refused beyond 127 ranks. Wire: 1 byte
    an element (fp16: 2, fp32: 4) plus one float per gradient."""

    def __init__(self):
        super().__init__()

    def __repr__(self):
        return 'Int8Quantizer()'

    @staticmethod
    def levels(size):
        levels = 127 // size
        if levels < 1:
            raise ValueError('Int8Quantizer needs the sum of every rank\'s int8 values to fit '
                             'int8: at most 127 ranks, the process set has {}'.format(size))
        return levels

    def reduce(self, grads, keys, comm):
        ops = self._ops
        if not grads:
            return []
        levels = self.levels(comm.size)
        ms, slots_list = [], []
        for g, key in zip(grads, keys):
            c = ops.compute(g)
            slots = self._slots_for(
                key, lambda _, c=c, shape=ops.shape(g): {'residual': lambda: ops.zeros(shape, c)})
            slots_list.append(slots)
            ms.append(ops.accumulate(slots['residual'], c))
        amax = comm.allreduce([ops.abs_max_all(ms)], 'max', 'int8.scale')[0]
        scales = ops.safe_scale(amax, levels)
        sent, tokens = [], []
        for i, (m, slots) in enumerate(zip(ms, slots_list)):
            s = ops.element(scales, i)
            q, qf = ops.quantize(m, s, levels)
            sent.append(q)
            tokens.append(ops.subtract_scaled(slots['residual'], m, qf, s))
        summed = comm.allreduce(sent, 'sum', 'int8.values')
        out = [ops.cast_like(ops.dequantize(q, ops.element(scales, i) / comm.size, ms[i]), g)
               for i, (q, g) in enumerate(zip(summed, grads))]
        return ops.after(out, tokens)


def check_error_feedback_args(compression, op, gradient_predivide_factor, groups, average, sum_):
    """Raises ValueError when an error-feedback ``compression`` is combined with what it cannot
    honour; anything else passes. ``average`` / ``sum_`` are the framework's op constants."""
    if not isinstance(compression, ErrorFeedbackCompressor):
        return
    if op not in (average, sum_):
        raise ValueError('{!r} averages (or sums) gradients; op must be Average or Sum'
                         .format(compression))
    if gradient_predivide_factor != 1.0:
        raise ValueError('{!r} cannot be combined with gradient_predivide_factor != 1.0'
                         .format(compression))
    if groups is not None and groups != 0:
        raise ValueError('{!r} groups the step\'s gradients itself (one grouped allreduce per '
                         'round); it cannot be combined with groups'.format(compression))
