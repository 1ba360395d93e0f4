"""Lifecycle, topology and build queries, shared by every framework adapter: the module-level
functions at the bottom (``init``, ``size``, ``rocm_built``, ...; ``__all__``) are what each
adapter re-exports.

All adapters drive the same core, so an ``init`` or ``shutdown`` through any of them resets
every loaded adapter's per-process state: an adapter registers its reset once, at import, with
``on_init_and_shutdown`` (torch resets its handle table, TensorFlow and Keras their counters of
unnamed collectives).
"""

import atexit
import os
import sys

from horovod.common import process_sets as _ps
from horovod.common.exceptions import HorovodRemovedError
from horovod.common.util import NOT_INITIALIZED_MESSAGE, env_bool

try:
    from horovod import _core
except ImportError as e:  # extension not built; adapters decide how loud to be
    _core = None
    _core_import_error = e
else:
    _core_import_error = None
    _ps._setup(_core)

# Whether init(process_sets="dynamic") enabled dynamic process sets (env is checked separately).
_dynamic_process_sets = False
# Whether HOROVOD_TIMELINE was set when init() ran (enables start/stop_timeline).
_timeline_enabled_at_init = False
_atexit_registered = False

_INIT_FAILED = ('Horovod initialization failed. Please check log messages above for a more '
                'descriptive error.')


# Successful init() calls in this process. An elastic reset re-initializes Horovod with other
# ranks: state laid out collectively (the torch optimizer's gradient buckets) is laid out again.
_init_count = 0


def init_count():
    return _init_count


# Called after every successful init() and every shutdown(), in registration order.
_reset_hooks = []


def on_init_and_shutdown(hook):
    """Registers ``hook()`` to run after every init() and shutdown() (once per hook, however
    often it is registered); returns ``hook``."""
    if hook not in _reset_hooks:
        _reset_hooks.append(hook)
    return hook


def _run_reset_hooks():
    for hook in _reset_hooks:
        hook()


def _require_core():
    if _core is None:
        raise ImportError('horovod._core (the compiled extension) is not available: {}'.format(
            _core_import_error))
    return _core


def _is_mpi_comm(obj):
    return type(obj).__module__.startswith('mpi4py')


class HorovodBasics:
    """Wraps the core's lifecycle/topology API with Horovod's Python semantics and messages."""

    def init(self, comm=None, process_sets=None):
        """Starts Horovod (blocks until every rank has joined). A second call while running does
        nothing.

        comm: None (all ranks) or a list of ranks (MPI only; ignored by the native controller), or
            an mpi4py communicator (needs an MPI build).
        process_sets: None, a list of ProcessSet (registered with ids 1..n in list order, must be
            identical on all ranks), or "dynamic" to allow add/remove_process_set later.
        """
        global _dynamic_process_sets, _timeline_enabled_at_init, _atexit_registered, _init_count
        core = _require_core()
        mpi_comm = None
        if comm is not None and not isinstance(comm, list):
            if not _is_mpi_comm(comm):
                raise ValueError('Invalid type of argument comm. Expected list of rank ids or '
                                 'mpi4py communicator, got {}'.format(type(comm)))
            if not core.mpi_built():
                raise ValueError('Horovod has not been built with MPI support. Ensure MPI is '
                                 'installed and reinstall Horovod with HOROVOD_WITH_MPI=1 to '
                                 'debug the build error.')
            mpi_comm = comm
        sets, dynamic = _ps._parse_init_argument(process_sets)
        if any(ps.mpi_comm is not None for ps in sets) and isinstance(comm, list) and comm:
            raise NotImplementedError('Process sets defined by MPI communicators are not '
                                      'supported together with a list of ranks as comm.')
        if core.is_initialized():
            return
        comm_handle = -1
        if mpi_comm is not None:
            from mpi4py import MPI
            if mpi_comm == MPI.COMM_NULL:
                raise ValueError('hvd.init(comm=...) got MPI.COMM_NULL: this process is not a member '
                                 'of the communicator; call hvd.init(comm=...) only on its members.')
            comm_handle = mpi_comm.py2f()
        if any(ps.mpi_comm is not None for ps in sets):
            # Collective over the job's communicator, before the core starts (docs/mpi.md).
            _ps._resolve_mpi_sets(sets, mpi_comm)
        _ps._set_job_comm(mpi_comm)
        if dynamic:
            os.environ['HOROVOD_DYNAMIC_PROCESS_SETS'] = '1'
            _dynamic_process_sets = True
        if not _atexit_registered:
            atexit.register(self.shutdown)
            _atexit_registered = True
        try:
            core.init([ps.ranks for ps in sets] if sets else None,
                      dynamic or env_bool('HOROVOD_DYNAMIC_PROCESS_SETS'), comm_handle)
        except HorovodRemovedError as e:
            # Elastic: this worker is not in the next round. Not an error: leave quietly.
            print('[horovod] {}: this worker exits'.format(e), file=sys.stderr, flush=True)
            raise SystemExit(0)
        except Exception as e:
            print('[horovod] init failed: {}: {}'.format(type(e).__name__, e), file=sys.stderr,
                  flush=True)
            raise ValueError(_INIT_FAILED) from e
        _init_count += 1
        _timeline_enabled_at_init = bool(os.environ.get('HOROVOD_TIMELINE'))
        _ps._after_init(sets)
        _run_reset_hooks()

    def shutdown(self):
        """Stops Horovod; pending operations fail. init() may be called again afterwards."""
        if _core is None:
            return
        _core.shutdown()
        _ps._after_shutdown()
        _run_reset_hooks()

    def is_initialized(self):
        return _core is not None and _core.is_initialized()

    def _check_initialized(self):
        if _core is None or not _core.is_initialized():
            raise ValueError(NOT_INITIALIZED_MESSAGE)

    def start_timeline(self, file_path, mark_cycles=False):
        """Starts writing a timeline to ``file_path`` (rank 0 writes). Needs HOROVOD_TIMELINE set
        (e.g. to DYNAMIC) when init() ran."""
        self._check_initialized()
        if not _timeline_enabled_at_init:
            raise ValueError('Set HOROVOD_TIMELINE=DYNAMIC to enable dynamic timeline usage.')
        if not hasattr(_core, 'start_timeline'):
            raise NotImplementedError('This build of the Horovod core has no dynamic timeline.')
        _core.start_timeline(file_path, mark_cycles)

    def stop_timeline(self):
        """Stops writing the timeline."""
        self._check_initialized()
        if hasattr(_core, 'stop_timeline'):
            _core.stop_timeline()

    def size(self):
        return _require_core().size()

    def local_size(self):
        return _require_core().local_size()

    def cross_size(self):
        return _require_core().cross_size()

    def rank(self):
        return _require_core().rank()

    def local_rank(self):
        return _require_core().local_rank()

    def cross_rank(self):
        return _require_core().cross_rank()

    def is_homogeneous(self):
        return _require_core().is_homogeneous()

    def mpi_threads_supported(self):
        self._check_initialized()
        if not _core.mpi_enabled():
            raise ValueError("Horovod MPI is not enabled; Please make sure it's installed and "
                             "enabled.")
        return bool(_core.mpi_threads_supported())

    def mpi_enabled(self):
        return bool(_core is not None and _core.mpi_enabled())

    def mpi_built(self):
        return bool(_core is not None and _core.mpi_built())

    def gloo_enabled(self):
        return bool(_core is not None and _core.gloo_enabled())

    def gloo_built(self):
        return bool(_core is not None and _core.gloo_built())

    def nccl_built(self):
        return int(_core.nccl_built()) if _core is not None else 0

    def ddl_built(self):
        return bool(_core is not None and _core.ddl_built())

    def ccl_built(self):
        return bool(_core is not None and _core.ccl_built())

    def cuda_built(self):
        return bool(_core is not None and _core.cuda_built())

    def rocm_built(self):
        return bool(_core is not None and _core.rocm_built())

    def engine_counters(self):
        """How many collectives the engine ran since the last init(), by the backend and
        algorithm that ran them: {(backend, algorithm): count}, e.g. {('cpu', 'ring'): 12,
        ('cpu', 'allgatherv'): 3} or {('mpi', 'mpi_allreduce'): 12}. The names are those of the
        timeline's collective events (docs/timeline.md lists them); a fused response counts
        once. Empty when Horovod is not initialized. For tests and benchmarks: which data path
        ran."""
        if _core is None:
            return {}
        return {(backend, algorithm): count for backend, algorithm, count in _core.engine_counters()}


# What every framework module re-exports (``from horovod.common.basics import *``).
__all__ = ['init', 'shutdown', 'is_initialized', 'start_timeline', 'stop_timeline',
           'size', 'local_size', 'cross_size', 'rank', 'local_rank', 'cross_rank',
           'is_homogeneous', 'mpi_threads_supported', 'mpi_enabled', 'mpi_built',
           'gloo_enabled', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built', 'cuda_built',
           'rocm_built', 'engine_counters']

_basics = HorovodBasics()

init = _basics.init
shutdown = _basics.shutdown
is_initialized = _basics.is_initialized
start_timeline = _basics.start_timeline
stop_timeline = _basics.stop_timeline
size = _basics.size
local_size = _basics.local_size
cross_size = _basics.cross_size
rank = _basics.rank
local_rank = _basics.local_rank
cross_rank = _basics.cross_rank
is_homogeneous = _basics.is_homogeneous
mpi_threads_supported = _basics.mpi_threads_supported
mpi_enabled = _basics.mpi_enabled
mpi_built = _basics.mpi_built
gloo_enabled = _basics.gloo_enabled
gloo_built = _basics.gloo_built
nccl_built = _basics.nccl_built
ddl_built = _basics.ddl_built
ccl_built = _basics.ccl_built
cuda_built = _basics.cuda_built
rocm_built = _basics.rocm_built
engine_counters = _basics.engine_counters
