"""JAX collectives on the Horovod core, eagerly and inside ``jax.jit``.

Eager calls (concrete ``jax.Array`` inputs on the CPU) hand the inputs to the core as DLPack
views (no copy), let it write into host buffers this module allocates, and wrap those buffers
as ``jax.Array`` with ``jax.dlpack.from_dlpack``. Every call blocks until its collective
completed.

Traced calls (inside ``jax.jit``, ``jax.grad``, ``lax.scan``...) become XLA FFI custom calls
into the core, or ordered ``io_callback``s when those cannot be used (``_xla.py`` says how one is
chosen; ``HOROVOD_JAX_JIT_PATH``): the compiled program runs the collective when the step runs,
in program order, with no recompilation between steps. Their output shape must be known while
tracing, hence restrictions there: allgather needs the same first dimension on every rank
(checked when the step runs; a mismatch raises), alltoall takes no splits (equal parts, the
first dimension a multiple of the set size), and join, barrier and the object helpers are
refused (``NotImplementedError``). ``jax.vmap`` of a traced collective is refused too.

Gradients (``jax.grad`` / ``jax.vjp``) are defined as in the torch adapter: the gradient of an
allreduce (Average or Sum) is the same allreduce of the incoming gradient; of an allgather, this
rank's rows of the averaged incoming gradient; of a broadcast, the averaged incoming gradient on
the root and zeros elsewhere; of a reducescatter, the allgather of the incoming gradient
(divided by the set size for Average). Min, Max and Product have no gradient here: taking one
raises ``ValueError``.

bfloat16: numpy cannot hand bfloat16 buffers to the core, so bfloat16 data moves as its 16-bit
pattern (allgather, broadcast, alltoall: exact) and bfloat16 reductions run in float32, rounded
to bfloat16 once at the end (Min/Max exact; Sum/Average at least as accurate as a bfloat16 sum).

Naming: ``<prefix><name>``, or ``<prefix>jax.noname.<n>`` for an unnamed call, ``n`` counting
this adapter's unnamed calls in the order they run (reset by init and shutdown). Traced calls
take their generated name when the step runs, so unnamed calls match across ranks whenever
every rank runs the same sequence of collectives.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from horovod.common.call_names import CallNamer
from horovod.jax import _xla
from horovod.common import basics as _basics_mod
from horovod.common import ops as _ops
from horovod.common.basics import *  # noqa: F401,F403 (the basics, re-exported)
from horovod.common.exceptions import HorovodInternalError
from horovod.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from horovod.common.process_sets import (ProcessSet, global_process_set,  # noqa: F401
                                         add_process_set, remove_process_set)
from horovod.common.util import (check_installed_version,
                                 get_average_backwards_compatibility_fun)

_core = _basics_mod._core

# There is no compiled JAX component: every jax version is accepted (the check only records it).
check_installed_version('jax', jax.__version__)

# (full core name, one_off) for one call, taken when the collective runs.
_name = CallNamer('jax')


class _ReduceOps:
    Average = Average
    Sum = Sum


handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_ReduceOps)

_SUPPORTED = frozenset(np.dtype(d) for d in (
    np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32,
    np.float64, np.bool_, jnp.bfloat16))
_BF16 = np.dtype(jnp.bfloat16)


def _psid(process_set):
    ps_id = process_set.process_set_id
    if ps_id is None:
        raise ValueError('Process set provided does not exist, or has not been registered.')
    return ps_id


def _set_size_rank(process_set):
    if _psid(process_set) == 0:
        return _core.size(), _core.rank()
    return process_set.size(), process_set.rank()


def _set_size_rank_of(ps_id):
    """(size, this rank's index) of the process set with id ``ps_id``."""
    if ps_id == 0:
        return _core.size(), _core.rank()
    ranks = list(_core.process_set_ranks(ps_id))
    return len(ranks), ranks.index(_core.rank())


def _check(x):
    """``x`` as a jax array (numpy arrays and scalars accepted), of a dtype the core supports,
    on the CPU (horovod.jax runs on CPU arrays; horovod.dlpack takes GPU arrays)."""
    if not isinstance(x, (jax.Array, jax.core.Tracer)):
        x = jnp.asarray(x)
    dtype = np.dtype(x.dtype)
    if dtype not in _SUPPORTED:
        raise ValueError('Tensor type %s is not supported.' % dtype)
    if not isinstance(x, jax.core.Tracer):
        platforms = {d.platform for d in x.devices()}
        if platforms != {'cpu'}:
            raise ValueError('Tensor on %s is not supported: horovod.jax runs collectives on CPU '
                             'arrays; move it with jax.device_put(x, jax.devices("cpu")[0]), or '
                             'run GPU arrays through horovod.dlpack (docs/gpu.md).'
                             % ', '.join(sorted(platforms)))
    return x


def _traced(xs):
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def _refuse_in_jit(what):
    raise NotImplementedError(
        'horovod.jax: {} inside jax.jit (or under another JAX transformation) is not supported: '
        'its result shape depends on the other ranks. Call it outside the jitted function.'
        .format(what))


def _check_batching(xs):
    for x in xs:
        if 'Batch' in type(x).__name__:
            raise ValueError('horovod.jax: collectives cannot be vmapped (each rank is one '
                             'process; map over the batch inside the collective\'s input '
                             'instead).')


# ---- the host side: numpy / jax arrays in, numpy arrays out, blocking ---------------------------

def _wait(work):
    work.wait()
    return work


def _host_grouped_allreduce(xs, op, pre, post, ps_id, name):
    outputs = [np.empty(x.shape, np.dtype(x.dtype)) for x in xs]
    full, one_off = _name(_ops.GROUPED_ALLREDUCE if len(xs) > 1 else _ops.ALLREDUCE, name)
    if len(xs) == 1:
        _wait(_core.allreduce_async(xs[0], outputs[0], full, op, pre, post, ps_id, one_off))
    else:
        _wait(_core.grouped_allreduce_async(list(xs), outputs, full, op, pre, post, ps_id,
                                            one_off))
    return outputs


def _host_grouped_allgather(xs, ps_id, name):
    full, one_off = _name(_ops.GROUPED_ALLGATHER if len(xs) > 1 else _ops.ALLGATHER, name)
    if len(xs) == 1:
        work = _wait(_core.allgather_async(xs[0], full, ps_id, one_off))
    else:
        work = _wait(_core.grouped_allgather_async(list(xs), full, ps_id, one_off))
    return list(work.outputs())


def _host_broadcast(x, root_rank, ps_id, name):
    buf = np.array(x, copy=True, order='C')
    full, one_off = _name(_ops.BROADCAST, name)
    _wait(_core.broadcast_async(buf, root_rank, full, ps_id, one_off))
    return buf


def _host_reducescatter(xs, out_shapes, op, pre, post, ps_id, name):
    outputs = [np.empty(s, np.dtype(x.dtype)) for x, s in zip(xs, out_shapes)]
    full, one_off = _name(_ops.GROUPED_REDUCESCATTER if len(xs) > 1 else _ops.REDUCESCATTER,
                          name)
    if len(xs) == 1:
        _wait(_core.reducescatter_async(xs[0], outputs[0], full, op, pre, post, ps_id, one_off))
    else:
        _wait(_core.grouped_reducescatter_async(list(xs), outputs, full, op, pre, post, ps_id,
                                                one_off))
    return outputs


def _to_jax(array):
    return jax.dlpack.from_dlpack(array)


# ---- bfloat16 on the wire -----------------------------------------------------------------------

def _wire_reduce(x):
    return x.astype(jnp.float32) if np.dtype(x.dtype) == _BF16 else x


def _wire_move(x):
    return jax.lax.bitcast_convert_type(x, jnp.uint16) if np.dtype(x.dtype) == _BF16 else x


def _unwire(y, dtype):
    if np.dtype(dtype) != _BF16:
        return y
    if np.dtype(y.dtype) == np.uint16:
        return jax.lax.bitcast_convert_type(y, jnp.bfloat16)
    return y.astype(jnp.bfloat16)


# ---- allreduce ----------------------------------------------------------------------------------

def _resolve_op(op, average, process_set):
    op = handle_average_backwards_compatibility(op, average)
    _ops.check_adasum(op, _psid(process_set), _core.size)
    return op


@jax.jit
def _flatten(*xs):
    return jnp.concatenate([x.reshape(-1) for x in xs])


@functools.partial(jax.jit, static_argnums=1)
def _split(flat, shapes):
    out, start = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(flat[start:start + n].reshape(shape))
        start += n
    return out


def _grouped_allreduce_raw(xs, op, pre, post, process_set, name):
    """The collective on wire-typed arrays, eager or traced; no gradient rule.

    Several arrays of one dtype travel as one flat array (one jitted concatenation, one
    allreduce, one jitted split): one DLPack crossing each way instead of one per array, which
    is most of the eager cost. Adasum reduces each array as a whole vector, so it is not
    flattened."""
    if len(xs) > 1 and op != Adasum and len({np.dtype(x.dtype) for x in xs}) == 1:
        shapes = tuple(tuple(x.shape) for x in xs)
        flat = _grouped_allreduce_raw([_flatten(*xs)], op, pre, post, process_set, name)[0]
        return list(_split(flat, shapes))
    ps_id = _psid(process_set)
    if not _traced(xs):
        return [_to_jax(o) for o in _host_grouped_allreduce(xs, op, pre, post, ps_id, name)]
    _check_batching(xs)
    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]
    if _xla.path() == 'ffi':
        prefix = _ops.GROUPED_ALLREDUCE if len(xs) > 1 else _ops.ALLREDUCE
        return list(_xla.call('allreduce', shapes, xs, prefix, name, ps_id, op=int(op),
                              prescale=float(pre), postscale=float(post)))
    return list(io_callback(
        lambda *a: _host_grouped_allreduce(a, op, pre, post, ps_id, name), shapes, *xs,
        ordered=True))


def _grouped_allreduce_diff(xs, op, pre, post, process_set, name):
    """With the gradient rule when traced (see the module docstring; the FFI path's primitive
    carries the same rules itself, _xla._transpose)."""
    if not _traced(xs) or _xla.path() == 'ffi':
        return _grouped_allreduce_raw(xs, op, pre, post, process_set, name)

    @jax.custom_vjp
    def f(*args):
        return _grouped_allreduce_raw(list(args), op, pre, post, process_set, name)

    def fwd(*args):
        return f(*args), None

    def bwd(_, grads):
        if op not in (Average, Sum):
            raise ValueError('horovod.jax: the gradient of allreduce with op {} is not defined '
                             '(only Average and Sum are differentiable).'.format(op))
        return tuple(_grouped_allreduce_raw(list(grads), op, pre, post, process_set, None))

    f.defvjp(fwd, bwd)
    return list(f(*xs))


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      compression=None):
    """Allreduce of a list of arrays, negotiated as one unit (fused in the core). Returns a list
    of new arrays: postscale_factor * OP(prescale_factor * x) over the set's ranks; Average
    divides by the set size. Differentiable for Average and Sum."""
    op = _resolve_op(op, average, process_set)
    tensors = [_check(t) for t in tensors]
    if not tensors:
        return []
    ctxs = None
    if compression is not None:
        pairs = [compression.compress(t) for t in tensors]
        tensors, ctxs = [p[0] for p in pairs], [p[1] for p in pairs]
    dtypes = [t.dtype for t in tensors]
    out = _grouped_allreduce_diff([_wire_reduce(t) for t in tensors], op, prescale_factor,
                                  postscale_factor, process_set, name)
    out = [_unwire(y, d) for y, d in zip(out, dtypes)]
    if ctxs is not None:
        out = [compression.decompress(y, c) for y, c in zip(out, ctxs)]
    return out


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Reduces ``tensor`` over the ranks of ``process_set``; returns a new array (JAX arrays are
    immutable: there is no in-place form). See grouped_allreduce."""
    return grouped_allreduce([tensor], average, name, op, prescale_factor, postscale_factor,
                             process_set, compression)[0]


# ---- allgather ----------------------------------------------------------------------------------

def _gathered_rows(process_set, rows):
    size, _ = _set_size_rank(process_set)
    return size * rows


def _grouped_allgather_raw(xs, process_set, name):
    ps_id = _psid(process_set)
    if not _traced(xs):
        return [_to_jax(o) for o in _host_grouped_allgather(xs, ps_id, name)]
    _check_batching(xs)
    for x in xs:
        if x.ndim == 0:
            raise ValueError('horovod.jax: allgather inside jax.jit needs arrays of rank >= 1.')
    shapes = [jax.ShapeDtypeStruct((_gathered_rows(process_set, x.shape[0]),) + x.shape[1:],
                                   x.dtype) for x in xs]
    if _xla.path() == 'ffi':
        prefix = _ops.GROUPED_ALLGATHER if len(xs) > 1 else _ops.ALLGATHER
        return list(_xla.call('allgather', shapes, xs, prefix, name, ps_id))

    def host(*args):
        outs = [np.from_dlpack(o) for o in _host_grouped_allgather(args, ps_id, name)]
        for o, s in zip(outs, shapes):
            if tuple(o.shape) != s.shape:
                raise ValueError(
                    'horovod.jax: allgather inside jax.jit needs the same first dimension on '
                    'every rank; gathered shape {} where {} was traced.'.format(
                        tuple(o.shape), s.shape))
        return outs
    return list(io_callback(host, shapes, *xs, ordered=True))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather of each array of a list (concatenation along dimension 0 in set-rank order);
    returns a list. Eagerly the first dimensions may differ across ranks; inside jax.jit they
    must agree. Differentiable."""
    tensors = [_check(t) for t in tensors]
    if not tensors:
        return []
    dtypes = [t.dtype for t in tensors]
    xs = [_wire_move(t) for t in tensors]
    if not _traced(xs) or _xla.path() == 'ffi':
        out = _grouped_allgather_raw(xs, process_set, name)
    else:
        rows = [x.shape[0] if x.ndim else 1 for x in xs]

        @jax.custom_vjp
        def f(*args):
            return _grouped_allgather_raw(list(args), process_set, name)

        def fwd(*args):
            return f(*args), None

        def bwd(_, grads):
            reduced = _grouped_allreduce_raw([_wire_reduce(g) for g in grads], Average, 1.0,
                                             1.0, process_set, None)
            _, r = _set_size_rank(process_set)
            return tuple(_unwire(g, d)[r * n:(r + 1) * n]
                         for g, n, d in zip(reduced, rows, [g.dtype for g in grads]))

        f.defvjp(fwd, bwd)
        out = list(f(*xs))
    return [_unwire(y, d) for y, d in zip(out, dtypes)]


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's ``tensor`` along dimension 0, in set-rank order."""
    return grouped_allgather([tensor], name, process_set)[0]


# ---- broadcast ----------------------------------------------------------------------------------

def _broadcast_raw(x, root_rank, process_set, name):
    ps_id = _psid(process_set)
    if not _traced([x]):
        return _to_jax(_host_broadcast(x, root_rank, ps_id, name))
    _check_batching([x])
    if _xla.path() == 'ffi':
        return _xla.call('broadcast', [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x],
                         _ops.BROADCAST, name, ps_id, root=int(root_rank))[0]
    return io_callback(lambda a: _host_broadcast(a, root_rank, ps_id, name),
                       jax.ShapeDtypeStruct(x.shape, x.dtype), x, ordered=True)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root's ``tensor`` on every rank of the set (``root_rank`` is a global rank).
    Differentiable."""
    tensor = _check(tensor)
    dtype = tensor.dtype
    x = _wire_move(tensor)
    if not _traced([x]) or _xla.path() == 'ffi':
        return _unwire(_broadcast_raw(x, root_rank, process_set, name), dtype)

    @jax.custom_vjp
    def f(a):
        return _broadcast_raw(a, root_rank, process_set, name)

    def fwd(a):
        return f(a), None

    def bwd(_, g):
        reduced = _unwire(_grouped_allreduce_raw([_wire_reduce(g)], Average, 1.0, 1.0,
                                                 process_set, None)[0], g.dtype)
        if _core.rank() != root_rank:
            reduced = jnp.zeros_like(reduced)
        return (reduced,)

    f.defvjp(fwd, bwd)
    return _unwire(f(x), dtype)


# ---- alltoall -----------------------------------------------------------------------------------

def _alltoall_traced(x, process_set, name):
    """alltoall of equal parts inside jax.jit: every rank sends d/n rows to each set rank and
    receives as many, so the output has the input's shape (d the first dimension, n the set
    size; every rank must pass the same d)."""
    _check_batching([x])
    n, _ = _set_size_rank(process_set)
    if x.ndim == 0 or x.shape[0] % n:
        raise ValueError('horovod.jax: alltoall inside jax.jit needs a first dimension that is a '
                         'multiple of the process set size ({}); got shape {}.'
                         .format(n, tuple(x.shape)))
    ps_id = _psid(process_set)
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    if _xla.path() == 'ffi':
        return _xla.call('alltoall', [shape], [x], _ops.ALLTOALL, name, ps_id)[0]

    def host(a):
        full, one_off = _name(_ops.ALLTOALL, name)
        out = np.from_dlpack(_wait(_core.alltoall_async(a, None, full, ps_id,
                                                         one_off)).outputs()[0])
        if tuple(out.shape) != shape.shape:
            raise ValueError('horovod.jax: alltoall inside jax.jit needs the same first '
                             'dimension on every rank; received shape {} where {} was traced.'
                             .format(tuple(out.shape), shape.shape))
        return out
    return io_callback(host, shape, x, ordered=True)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends rows of dimension 0 to the set's ranks (``splits[i]`` rows to set rank i; None:
    equal parts) and concatenates what arrives. Returns ``(output, received_splits)`` when
    ``splits`` is given, else ``output`` (Horovod's convention). Inside jax.jit: equal parts only
    (``splits=None``), not differentiable."""
    tensor = _check(tensor)
    if _traced([tensor]) or (splits is not None and _traced([splits])):
        if splits is not None:
            _refuse_in_jit('alltoall with splits')
        return _unwire(_alltoall_traced(_wire_move(tensor), process_set, name), tensor.dtype)
    split_values = None
    if splits is not None:
        arr = np.asarray(splits)
        if arr.ndim != 1:
            raise ValueError('alltoall expects a 1D splits tensor')
        if arr.dtype.kind not in 'iu':
            raise ValueError('alltoall expects splits to contain 32-bit integer elements.')
        split_values = [int(s) for s in arr.tolist()]
    dtype = tensor.dtype
    full, one_off = _name(_ops.ALLTOALL, name)
    work = _wait(_core.alltoall_async(_wire_move(tensor), split_values, full,
                                      _psid(process_set), one_off))
    output = _unwire(_to_jax(work.outputs()[0]), dtype)
    if splits is None:
        return output
    return output, jnp.asarray(np.array(work.received_splits(), dtype=np.int32))


# ---- reducescatter ------------------------------------------------------------------------------

def _check_reducescatter_op(op):
    if op not in (Average, Sum):
        raise HorovodInternalError('Reducescatter currently only supports AVERAGE and SUM.')


def _scatter_shape(x, process_set):
    if x.ndim == 0:
        raise ValueError('Reducescatter does not support scalar inputs')
    n, r = _set_size_rank(process_set)
    d = x.shape[0]
    return (d // n + (1 if r < d % n else 0),) + tuple(x.shape[1:])


def _grouped_reducescatter_raw(xs, op, pre, post, process_set, name):
    ps_id = _psid(process_set)
    shapes = [_scatter_shape(x, process_set) for x in xs]
    if not _traced(xs):
        return [_to_jax(o) for o in _host_reducescatter(xs, shapes, op, pre, post, ps_id, name)]
    _check_batching(xs)
    structs = [jax.ShapeDtypeStruct(s, x.dtype) for s, x in zip(shapes, xs)]
    if _xla.path() == 'ffi':
        prefix = _ops.GROUPED_REDUCESCATTER if len(xs) > 1 else _ops.REDUCESCATTER
        return list(_xla.call('reducescatter', structs, xs, prefix, name, ps_id, op=int(op),
                              prescale=float(pre), postscale=float(post)))
    return list(io_callback(
        lambda *a: _host_reducescatter(a, shapes, op, pre, post, ps_id, name), structs, *xs,
        ordered=True))


def grouped_reducescatter(tensors, op=Average, name=None, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reduces each array over the set; this rank keeps its block of dimension 0 (set rank r of
    n gets d//n + 1 rows if r < d % n, else d//n). op: Average or Sum. Differentiable when d is
    a multiple of n."""
    _check_reducescatter_op(op)
    tensors = [_check(t) for t in tensors]
    if not tensors:
        return []
    dtypes = [t.dtype for t in tensors]
    xs = [_wire_reduce(t) for t in tensors]
    if not _traced(xs) or _xla.path() == 'ffi':
        out = _grouped_reducescatter_raw(xs, op, prescale_factor, postscale_factor,
                                         process_set, name)
    else:
        @jax.custom_vjp
        def f(*args):
            return _grouped_reducescatter_raw(list(args), op, prescale_factor,
                                              postscale_factor, process_set, name)

        def fwd(*args):
            return f(*args), None

        def bwd(_, grads):
            n, _r = _set_size_rank(process_set)
            scale = prescale_factor * postscale_factor / (n if op == Average else 1)
            gathered = _grouped_allgather_raw(list(grads), process_set, None)
            return tuple(g * jnp.asarray(scale, g.dtype) for g in gathered)

        f.defvjp(fwd, bwd)
        out = list(f(*xs))
    return [_unwire(y, d) for y, d in zip(out, dtypes)]


def reducescatter(tensor, op=Average, name=None, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """See grouped_reducescatter."""
    return grouped_reducescatter([tensor], op, name, process_set, prescale_factor,
                                 postscale_factor)[0]


# ---- join / barrier -----------------------------------------------------------------------------

def join():
    """Declares this rank out of data and blocks until every rank joined (meanwhile this rank
    contributes zeros to the others' allreduces). Returns the rank that joined last. Eager
    only."""
    return _wait(_core.join_async()).join_result()


def barrier(process_set=global_process_set):
    """Blocks until every member of ``process_set`` reached the barrier. Eager only."""
    _wait(_core.barrier_async(_psid(process_set)))
