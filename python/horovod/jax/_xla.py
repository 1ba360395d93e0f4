"""How horovod.jax's collectives run inside ``jax.jit``: XLA FFI custom calls or ordered
io_callbacks.

``ffi`` (the default): each traced collective is one ``jax.ffi.ffi_call`` to a handler of
``_horovod_jax_ffi.so`` (cpp/frameworks/jax/), registered for the CPU platform. The compiled step
calls into the core directly, without Python or the GIL, and JAX keeps its C++ dispatch path. The
custom calls have a side effect, so XLA never drops them (even when their result is unused) and
runs them one at a time in program order; unnamed ones are named by the handler when they run
(``<op prefix>jax.xla.noname.<n>``, n counting this process's unnamed handler calls).

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
    missing = [n for n in ('ffi_call', 'register_ffi_target', 'pycapsule')
               if not hasattr(ffi, n)]
    if missing:
        raise FfiUnavailable('jax {} has no jax.ffi.{}'.format(jax.__version__, missing[0]))
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


def call(target, result_shapes, xs, prefix, name, process_set_id, **attrs):
    """One traced collective as an FFI custom call: ``target`` (allreduce, allgather, ...) on the
    arrays ``xs``, results of ``result_shapes`` (ShapeDtypeStructs). ``name``: the caller's name
    (None: named by the handler), ``prefix``: the core's op prefix; ``attrs``: op (int),
    prescale/postscale (float), root (int)."""
    typed = {k: (np.float64(v) if isinstance(v, float) else np.int64(v))
             for k, v in attrs.items()}
    return jax.ffi.ffi_call('horovod_jax_' + target, list(result_shapes), has_side_effect=True)(
        *xs, name=prefix + name if name else '', prefix=prefix, process_set=np.int64(process_set_id), **typed)
