"""How horovod.jax's collectives run inside ``jax.jit``: XLA FFI custom calls or ordered
io_callbacks.

``ffi`` (the default): each traced collective is one XLA FFI custom call (lowered by
``jax.ffi.ffi_lowering``) to a handler of ``_horovod_jax_ffi.so`` (cpp/frameworks/jax/),
registered for the CPU platform with ``jax.ffi.register_ffi_target``. The compiled step calls
into the core directly, without Python or the GIL. The custom call is marked as having a side
effect in the XLA program, so XLA never drops it (even when its result is unused) and keeps it
in program order. To JAX, though, it is a primitive without effects (``collective_p``): a jitted
step that contains one keeps JAX's C++ dispatch path, which any JAX effect (``ffi_call``'s
``has_side_effect``, an ordered callback) turns off at a per-argument cost. JAX's own dead-code
elimination is told to keep it (a DCE rule); it carries its own differentiation rules (the
torch adapter's, see mpi_ops) because a ``jax.custom_vjp`` around it would be dropped when its
result is unused. A block that JAX drops as a whole (a ``lax.scan``, ``while_loop``, ``cond``
or nested ``jax.jit`` none of whose results are used) takes its collectives with it, on every
rank alike.
Unnamed calls are named by the handler when they run (``<op prefix>jax.xla.noname.<n>``, n
counting this process's unnamed handler calls).

``callback``: ``jax.experimental.io_callback(..., ordered=True)`` into the eager host functions
(slower: the GIL, Python, and JAX's Python dispatch for functions with ordered effects).

``HOROVOD_JAX_JIT_PATH`` chooses: ``ffi`` (fail, naming why, if the handlers cannot run on this
jax), ``callback``, or unset (``ffi`` when usable, else ``callback`` with one warning naming why).
The handlers are usable when the library binds to this core, XLA accepts their FFI API version
at registration, and a probe call confirms the version and layout of what XLA passes them. The
choice is made once, at the first traced collective.
"""

import ctypes
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir

try:
    from jax.extend.core import Primitive
    from jax._src.interpreters import partial_eval as _pe
except ImportError:  # another jax layout: the FFI path reports itself unusable
    Primitive = _pe = None

from horovod.common import basics as _basics_mod

ENV = 'HOROVOD_JAX_JIT_PATH'
PATHS = ('ffi', 'callback')
_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), '_horovod_jax_ffi.so')
_TARGETS = ('allreduce', 'allgather', 'broadcast', 'reducescatter', 'alltoall')

_path = None  # 'ffi' or 'callback' once decided
_native = None


class FfiUnavailable(RuntimeError):
    """The FFI handlers cannot run on this jax (the message says why)."""


def _load():
    """Loads, binds, registers and probes the handlers (once); raises FfiUnavailable."""
    global _native
    if _native is not None:
        return
    ffi = getattr(jax, 'ffi', None)
    missing = [n for n in ('ffi_call', 'ffi_lowering', 'register_ffi_target', 'pycapsule')
               if not hasattr(ffi, n)]
    if missing:
        raise FfiUnavailable('jax {} has no jax.ffi.{}'.format(jax.__version__, missing[0]))
    if collective_p is None:
        raise FfiUnavailable('jax {} lacks the internals the FFI path registers its primitive '
                             'with (jax.extend.core.Primitive, partial_eval.dce_rules)'
                             .format(jax.__version__))
    if not os.path.exists(_LIBRARY):
        raise FfiUnavailable('{} is missing (horovod was built without it)'.format(_LIBRARY))
    native = ctypes.CDLL(_LIBRARY)
    native.horovod_jax_bind.restype = ctypes.c_char_p
    native.horovod_jax_bind.argtypes = [ctypes.c_void_p]
    native.horovod_jax_ffi_api_version.restype = ctypes.c_char_p
    native.horovod_jax_ffi_check.restype = ctypes.c_char_p
    native.horovod_jax_ffi_check.argtypes = [ctypes.POINTER(ctypes.c_int32)]
    error = native.horovod_jax_bind(_basics_mod._core.api_table_address()).decode()
    if error:
        raise FfiUnavailable(error)
    declared = native.horovod_jax_ffi_api_version().decode()
    try:
        for name in ('probe',) + _TARGETS:
            ffi.register_ffi_target('horovod_jax_' + name,
                                    ffi.pycapsule(getattr(native, 'horovod_jax_' + name)),
                                    platform='cpu')
        # Usually called while tracing a user's step: the probe must run now, not be traced.
        with jax.ensure_compile_time_eval():
            probed = np.asarray(jax.jit(ffi.ffi_call(
                'horovod_jax_probe', jax.ShapeDtypeStruct((4,), jnp.int32),
                has_side_effect=True))(), dtype=np.int32)
    except Exception as e:  # XLA refusing the handlers' API version lands here
        raise FfiUnavailable('XLA refused the handlers (they declare FFI API {}): {}'
                             .format(declared, e)) from None
    why = native.horovod_jax_ffi_check(probed.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)))
    if why:
        raise FfiUnavailable(why.decode())
    _basics_mod.on_init_and_shutdown(native.horovod_jax_reset_names)
    _native = native


def path():
    """'ffi' or 'callback': how traced collectives run (decided at the first call)."""
    global _path
    if _path is None:
        choice = os.environ.get(ENV, '').strip().lower()
        if choice and choice not in PATHS:
            raise ValueError('{}={!r}: expected one of {}'.format(ENV, os.environ[ENV],
                                                                 ', '.join(PATHS)))
        if choice == 'callback':
            _path = 'callback'
        else:
            try:
                _load()
                _path = 'ffi'
            except FfiUnavailable as e:
                if choice == 'ffi':
                    raise FfiUnavailable('{}=ffi, but the XLA FFI handlers cannot be used with '
                                         'jax {}: {}'.format(ENV, jax.__version__, e)) from None
                warnings.warn('horovod.jax: collectives inside jax.jit use io_callback (slower) '
                              'because the XLA FFI handlers cannot be used with jax {}: {}'
                              .format(jax.__version__, e))
                _path = 'callback'
    return _path


def select(choice):
    """Switches the path for collectives traced from now on (tests, benchmarks); returns the
    previous one. 'ffi' raises FfiUnavailable when the handlers cannot be used."""
    global _path
    if choice not in PATHS:
        raise ValueError('jit path {!r}: expected one of {}'.format(choice, ', '.join(PATHS)))
    previous = path()
    if choice == 'ffi':
        _load()
    _path = choice
    return previous


# ---- the primitive -------------------------------------------------------------------------------

def _abstract_eval(*avals, target, out_avals, attrs):
    return [jax.core.ShapedArray(shape, dtype) for shape, dtype in out_avals]


def _lowering(ctx, *operands, target, out_avals, attrs):
    return jax.ffi.ffi_lowering('horovod_jax_' + target, has_side_effect=True)(
        ctx, *operands, **dict(attrs))


def _keep(used_outputs, eqn):
    """DCE rule: the collective runs even when nothing uses its results (the other ranks wait
    for it)."""
    return [True] * len(eqn.invars), eqn


def _refuse_batching(*args, **params):
    raise ValueError('horovod.jax: collectives cannot be vmapped (each rank is one process; '
                     'map over the batch inside the collective\'s input instead).')


def _jvp(primals, tangents, *, target, out_avals, attrs):
    outs = collective_p.bind(*primals, target=target, out_avals=out_avals, attrs=attrs)
    if all(type(t) is ad.Zero for t in tangents):
        return outs, [ad.Zero(jax.core.get_aval(o).to_tangent_aval()) for o in outs]
    _differentiable(target, dict(attrs))
    # Every collective here is linear: its tangent is the same collective of the tangents
    # (unnamed: it is another collective), and reverse mode transposes that (_transpose).
    tangent_attrs = tuple((k, '' if k == 'name' else v) for k, v in attrs)
    return outs, collective_p.bind(*[ad.instantiate_zeros(t) for t in tangents], target=target,
                                   out_avals=out_avals, attrs=tangent_attrs)


def _differentiable(target, attrs):
    if target == 'alltoall':
        raise ValueError('horovod.jax: alltoall is not differentiable.')
    if target in ('allreduce', 'reducescatter') and attrs['op'] not in _LINEAR_OPS:
        raise ValueError('horovod.jax: the gradient of {} with op {} is not defined (only '
                         'Average and Sum are differentiable).'.format(target, attrs['op']))


_LINEAR_OPS = (0, 1)  # Average, Sum (horovod.common.ops)


def _transpose(cts, *args, target, out_avals, attrs):
    """The gradient rules of the torch adapter (mpi_ops' module docstring), on wire types."""
    from horovod.jax import mpi_ops  # the set's size and rank, the inverse collectives
    a = dict(attrs)
    cts = [ad.instantiate_zeros(ct) for ct in cts]
    ps_id = int(a['process_set'])
    n, r = mpi_ops._set_size_rank_of(ps_id)

    def averaged(xs):
        return bind('allreduce', [(x.shape, x.dtype) for x in xs], xs, _ALLREDUCE_PREFIX(xs),
                    None, ps_id, op=0, prescale=1.0, postscale=1.0)

    if target == 'allreduce':
        return bind('allreduce', [(c.shape, c.dtype) for c in cts], cts, a['prefix'], None,
                    ps_id, op=a['op'], prescale=a['prescale'], postscale=a['postscale'])
    if target == 'allgather':
        rows = [x.aval.shape[0] for x in args]
        return [g[r * k:(r + 1) * k] for g, k in zip(averaged(cts), rows)]
    if target == 'broadcast':
        g = averaged(cts)[0]
        return [g if mpi_ops._core.rank() == a['root'] else jnp.zeros_like(g)]
    if target == 'reducescatter':
        scale = a['prescale'] * a['postscale'] / (n if a['op'] == 0 else 1)
        shapes = [((n * c.shape[0],) + tuple(c.shape[1:]), c.dtype) for c in cts]
        gathered = bind('allgather', shapes, cts, mpi_ops._ops.GROUPED_ALLGATHER if len(cts) > 1
                        else mpi_ops._ops.ALLGATHER, None, ps_id)
        return [g * jnp.asarray(scale, g.dtype) for g in gathered]
    raise ValueError('horovod.jax: {} is not differentiable.'.format(target))


def _ALLREDUCE_PREFIX(xs):
    from horovod.common import ops
    return ops.GROUPED_ALLREDUCE if len(xs) > 1 else ops.ALLREDUCE


if Primitive is not None:
    collective_p = Primitive('horovod_jax_collective')
    collective_p.multiple_results = True
    collective_p.def_abstract_eval(_abstract_eval)
    # Concrete inputs (jax.disable_jit, compile-time evaluation): run it as a one-op program.
    collective_p.def_impl(lambda *xs, **params: jax.jit(
        lambda *a: collective_p.bind(*a, **params))(*xs))
    mlir.register_lowering(collective_p, _lowering, platform='cpu')
    _pe.dce_rules[collective_p] = _keep
    batching.primitive_batchers[collective_p] = _refuse_batching
    ad.primitive_jvps[collective_p] = _jvp
    ad.primitive_transposes[collective_p] = _transpose
else:
    collective_p = None


def bind(target, out_shapes, xs, prefix, name, process_set_id, **attrs):
    """One traced collective as an FFI custom call: ``target`` (allreduce, allgather, ...) on the
    arrays ``xs``, results of ``out_shapes`` ((shape, dtype) pairs). ``name``: the caller's
    name (None: named by the handler when it runs), ``prefix``: the core's op prefix;
    ``attrs``: op (int), prescale/postscale (float), root (int). Returns a list."""
    typed = [('name', prefix + name if name else ''), ('prefix', prefix),
             ('process_set', np.int64(process_set_id))]
    typed += [(k, np.float64(v) if isinstance(v, float) else np.int64(v))
              for k, v in sorted(attrs.items())]
    out_avals = tuple((tuple(int(d) for d in shape), np.dtype(dtype)) for shape, dtype in out_shapes)
    return collective_p.bind(*xs, target=target, out_avals=out_avals, attrs=tuple(typed))


def call(target, result_shapes, xs, prefix, name, process_set_id, **attrs):
    """``bind`` with ShapeDtypeStructs for the results."""
    return bind(target, [(r.shape, r.dtype) for r in result_shapes], xs, prefix, name,
                process_set_id, **attrs)
