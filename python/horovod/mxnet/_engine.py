"""Running Horovod collectives as operations of MXNet's dependency engine, through MXNet's C API
(``MXEnginePushAsyncND``, reached with ctypes: nothing is compiled against MXNet).

``push(start, reads, writes, priority, name)`` schedules ``start()`` as an engine operation that
reads the NDArrays ``reads`` and writes the NDArrays ``writes``: the engine runs it only once
every earlier write to ``reads`` and every earlier read or write of ``writes`` has finished, and
no later operation touching ``writes`` (or writing ``reads``) runs before it completed. So an
``allreduce_`` result is never read before the collective wrote it, and its input is never
overwritten while the collective reads it, without any ``wait_to_read`` in user code.

``start()`` runs on an engine worker thread; it enqueues the collective into the Horovod core
(non-blocking) and returns the core's Work. One waiter thread of this module waits for the
Works and then signals the engine that the operation completed, so no engine worker is ever
blocked by a collective (a blocked worker could starve the computation another rank waits for).

Failures: MXNet's C API offers no way to hand an error to the engine from outside C++, so a
failed collective completes its operation (the outputs keep their previous contents) and the
error is raised, as ``MXNetError``, once: by ``wait_to_read()`` / ``asnumpy()`` of an output
that horovod.mxnet allocated (a ``Result``), or else by the next horovod.mxnet call in this
process (``raise_pending``) or ``synchronize()``.
"""

import atexit
import ctypes
import queue
import threading

import mxnet as mx
from mxnet.base import _LIB, check_call

# The engine's completion callback, as laid out by mxnet/engine.h (CallbackOnComplete): the
# callback function, the engine, its parameter.
_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class _OnComplete(ctypes.Structure):
    _fields_ = [('callback', _CALLBACK), ('engine', ctypes.c_void_p),
                ('param', ctypes.c_void_p)]


# EngineAsyncFunc: (RunContext*, CallbackOnComplete*, param).
_ASYNC_FUNC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(_OnComplete),
                               ctypes.c_void_p)


class _Context(ctypes.Structure):  # mxnet::Context: device type (1 = CPU), device id
    _fields_ = [('dev_type', ctypes.c_int32), ('dev_id', ctypes.c_int32)]


_CPU = _Context(1, 0)

_lock = threading.Lock()
_ops = {}          # op id -> (start, name, handles of the outputs to watch)
_next_id = [0]
_waits = queue.Queue()
_errors = []       # [name, exception, watched handles] of failed operations, raised once
_pending = [0]     # operations pushed and not yet completed
_idle = threading.Condition(_lock)


def _signal(on_complete):
    on_complete.callback(on_complete.engine, on_complete.param, None)


def _run(rctx, on_complete_p, param):
    """The engine calls this when the operation's inputs are ready (GIL taken by ctypes)."""
    op_id = param or 0
    with _lock:
        start, name, watched = _ops.pop(op_id)
    on_complete = _OnComplete(on_complete_p.contents.callback, on_complete_p.contents.engine,
                              on_complete_p.contents.param)
    try:
        work = start()
    except BaseException as e:  # noqa: B902 - reported by raise_pending, never lost
        _fail(name, e, watched)
        _signal(on_complete)
        _done()
        return
    _waits.put((work, on_complete, name, watched))


_run_c = _ASYNC_FUNC(_run)


def _fail(name, error, watched):
    with _lock:
        _errors.append([name, error, watched])


def _done():
    with _lock:
        _pending[0] -= 1
        if _pending[0] == 0:
            _idle.notify_all()


def _waiter():
    while True:
        work, on_complete, name, watched = _waits.get()
        try:
            work.wait()
        except BaseException as e:  # noqa: B902
            _fail(name, e, watched)
        _signal(on_complete)
        _done()


threading.Thread(target=_waiter, name='horovod-mxnet-waiter', daemon=True).start()


@atexit.register
def _drain():
    """At exit (after Horovod's own shutdown, which fails what is still pending), lets the
    engine finish every operation whose completion this module still has to signal (for at
    most 30 s: an operation whose inputs never become ready must not hang the exit)."""
    with _lock:
        _idle.wait_for(lambda: _pending[0] == 0, timeout=30)


def _handles(arrays):
    arr = (ctypes.c_void_p * max(len(arrays), 1))(*[a.handle.value for a in arrays])
    return arr, len(arrays)


def push(start, reads, writes, priority=0, name='horovod', watch=()):
    """Schedules ``start`` (returns a core Work) after the engine's earlier operations on
    ``reads`` (read) and ``writes`` (written); see the module docstring. A failure is raised by
    ``wait_to_read()`` of the ``Result`` arrays in ``watch``."""
    for a in list(reads) + list(writes):
        if a.context.device_type != 'cpu':
            raise ValueError('Horovod was built without GPU support: NDArray on {} is not '
                             'supported; use mx.cpu().'.format(a.context))
    with _lock:
        _next_id[0] += 1
        op_id = _next_id[0]
        _ops[op_id] = (start, name, frozenset(a.handle.value for a in watch))
        _pending[0] += 1
    const, n_const = _handles(reads)
    mutable, n_mut = _handles(writes)
    try:
        check_call(_LIB.MXEnginePushAsyncND(
            _run_c, ctypes.c_void_p(op_id), None, ctypes.byref(_CPU), const, n_const, mutable,
            n_mut, None, ctypes.c_int(int(priority)), mx.base.c_str(name), ctypes.c_bool(False)))
    except BaseException:
        with _lock:
            _ops.pop(op_id, None)
        _done()
        raise


def _raise(errors):
    name, error, _ = errors[0]
    more = '' if len(errors) == 1 else ' (and {} more failed operations)'.format(len(errors) - 1)
    raise mx.base.MXNetError('Horovod operation {} failed: {}{}'.format(name, error, more)) \
        from error


def raise_pending():
    """Raises the first recorded failure of an earlier operation as MXNetError (and forgets
    them all)."""
    with _lock:
        errors = list(_errors)
        _errors.clear()
    if errors:
        _raise(errors)


def raise_for(array):
    """Raises (once) the failure of the operation that wrote ``array``, if it failed."""
    handle = array.handle.value
    with _lock:
        mine = [e for e in _errors if handle in e[2]]
        for e in mine:
            _errors.remove(e)
    if mine:
        _raise(mine)


class Result(mx.nd.NDArray):
    """An output allocated by horovod.mxnet: ``wait_to_read()`` (and so ``asnumpy()``,
    ``asscalar()``) raises the failure of the Horovod operation that wrote it, as MXNetError."""
    __slots__ = []

    def wait_to_read(self):
        super().wait_to_read()
        raise_for(self)

    def asnumpy(self):
        self.wait_to_read()
        return super().asnumpy()


def result(array):
    """``array`` (just allocated by horovod.mxnet) as a Result."""
    array.__class__ = Result
    return array


def synchronize():
    """Waits until every pushed operation completed, then raises any failure."""
    mx.nd.waitall()
    with _lock:
        while _pending[0]:
            _idle.wait()
    raise_pending()
