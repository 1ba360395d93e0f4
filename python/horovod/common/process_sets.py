"""Process sets: subsets of ranks that run collectives among themselves.

``global_process_set`` (id 0) always exists. Static sets are registered by
``hvd.init(process_sets=[...])`` (ids 1..n in list order); with dynamic process sets enabled
(``hvd.init(process_sets="dynamic")`` or ``HOROVOD_DYNAMIC_PROCESS_SETS=1``) sets can be added and
removed later, collectively, in the same order on every rank.
"""

import numbers

from horovod.common.util import NOT_INITIALIZED_MESSAGE, env_bool

_core = None  # set by HorovodBasics once the extension is loaded
# The mpi4py communicator that forms the job (hvd.init(comm=...)); None = MPI.COMM_WORLD.
_job_comm = None


def _is_mpi_comm(obj):
    return type(obj).__module__.startswith('mpi4py')


class ProcessSet:
    """A set of global ranks. ``ranks`` is sorted; ``process_set_id`` is None until the set is
    registered with Horovod."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        if _is_mpi_comm(ranks_or_comm):
            if _core is None or not _core.mpi_built():
                raise ValueError('Horovod has not been built with MPI support. Process sets based '
                                 'on mpi4py communicators need an MPI build.')
            self.mpi_comm = ranks_or_comm
            return
        ranks = list(ranks_or_comm)
        for r in ranks:
            if not isinstance(r, numbers.Integral):
                raise ValueError('Ranks of a process set must be integers, got {!r}'.format(r))
        self.ranks = sorted(int(r) for r in ranks)

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Number of ranks in the set; None while unregistered."""
        if self.process_set_id is None:
            return None
        return len(_ranks_of(self.process_set_id))

    def rank(self):
        """This process's index within the (sorted) set; None while unregistered."""
        if self.process_set_id is None:
            return None
        ranks = _ranks_of(self.process_set_id)
        me = _core.rank()
        try:
            return ranks.index(me)
        except ValueError:
            raise ValueError('Process is not part of provided process set.')

    def included(self):
        """Whether this process belongs to the set; None if the ranks are unknown."""
        if self.ranks is None:
            return None
        return _core.rank() in self.ranks

    def __str__(self):
        return 'ProcessSet(process_set_id={}, ranks={}, mpi_comm={})'.format(
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# id -> ProcessSet object registered under that id (the global set included).
_registry = {0: global_process_set}


def _ranks_of(process_set_id):
    if _core is None or not _core.is_initialized():
        raise ValueError(NOT_INITIALIZED_MESSAGE)
    try:
        return list(_core.process_set_ranks(process_set_id))
    except ValueError:
        raise ValueError('Process set does not exist or has not been registered.')


def _setup(core):
    global _core
    _core = core


def _set_job_comm(comm):
    global _job_comm
    _job_comm = comm


def _mpi_set_ranks(comm, job_comm):
    """Collective over job_comm: the sorted job ranks of the processes in ``comm`` (an mpi4py
    communicator, MPI.COMM_NULL on processes outside it). Every process of job_comm must call it
    for the same set; a mismatch raises ValueError on every process, naming the ranks."""
    from mpi4py import MPI
    if job_comm is None:
        job_comm = MPI.COMM_WORLD
    if comm == MPI.COMM_NULL:
        mine = ('null', None)
    else:
        translated = comm.Get_group().Translate_ranks(list(range(comm.Get_size())), job_comm.Get_group())
        if any(r == MPI.UNDEFINED for r in translated):
            mine = ('error', 'its communicator has processes outside the Horovod job')
        else:
            mine = ('ranks', sorted(translated))
    views = job_comm.allgather(mine)
    for rank, (kind, value) in enumerate(views):
        if kind == 'error':
            raise ValueError('ProcessSet(mpi4py communicator) on rank {}: {}'.format(rank, value))
    members = {rank: value for rank, (kind, value) in enumerate(views) if kind == 'ranks'}
    if not members:
        raise ValueError('ProcessSet(mpi4py communicator): the communicator is MPI.COMM_NULL on every '
                         'rank; a process set needs at least one member.')
    first = next(iter(members))
    for rank, ranks in members.items():
        if ranks != members[first]:
            raise ValueError('ProcessSet(mpi4py communicator) differs between ranks: rank {} has {}, rank '
                             '{} has {}. Every member must pass the same communicator (others '
                             'MPI.COMM_NULL).'.format(first, members[first], rank, ranks))
    outside = sorted(set(members[first]) ^ set(members))
    if outside:
        raise ValueError('ProcessSet(mpi4py communicator): ranks {} disagree about membership (the '
                         'communicator has ranks {}); processes outside it must pass '
                         'MPI.COMM_NULL.'.format(outside, members[first]))
    return members[first]


def _resolve_mpi_sets(process_sets, job_comm):
    """Fills in ``ranks`` of the sets defined by mpi4py communicators (collective)."""
    for ps in process_sets:
        if ps.mpi_comm is not None:
            ps.ranks = _mpi_set_ranks(ps.mpi_comm, job_comm)


def _parse_init_argument(process_sets):
    """Returns (list of ProcessSet, dynamic) for ``init(process_sets=...)``."""
    if process_sets is None:
        return [], False
    if isinstance(process_sets, str):
        if process_sets.lower() == 'dynamic':
            return [], True
        raise ValueError('Invalid value for process_sets: {!r}; expected a list of ProcessSet or '
                         '"dynamic"'.format(process_sets))
    result = []
    seen = {}
    for i, ps in enumerate(process_sets):
        if not isinstance(ps, ProcessSet):
            ps = ProcessSet(ps)
        if ps.mpi_comm is None:
            key = tuple(ps.ranks)
            if key in seen:
                raise ValueError('Process set entry {} ({}) duplicates entry {}: process sets must '
                                 'be unique.'.format(i, ps, seen[key]))
            seen[key] = i
        result.append(ps)
    return result, False


def _after_init(process_sets):
    """Called after the core is initialized: fills in ids and the global set's ranks."""
    global_process_set.ranks = list(range(_core.size()))
    _registry.clear()
    _registry[0] = global_process_set
    for ps, ps_id in zip(process_sets, [i for i in _core.process_set_ids() if i != 0]):
        ps.process_set_id = ps_id
        _registry[ps_id] = ps


def _after_shutdown():
    for ps_id, ps in list(_registry.items()):
        if ps_id != 0:
            ps._invalidate()
    _registry.clear()
    _registry[0] = global_process_set


def _dynamic_enabled():
    from horovod.common import basics
    return basics._dynamic_process_sets or env_bool('HOROVOD_DYNAMIC_PROCESS_SETS')


def add_process_set(process_set):
    """Collective: registers a new process set (a ProcessSet or a list of ranks) on every rank.
    All ranks must call it identically and in the same order. Returns the registered set."""
    if _core is None or not _core.is_initialized():
        raise ValueError(NOT_INITIALIZED_MESSAGE)
    if not _dynamic_enabled():
        raise ValueError('Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding process sets after '
                         'Horovod initialization.')
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.mpi_comm is not None:
        process_set.ranks = _mpi_set_ranks(process_set.mpi_comm, _job_comm)
    for ps_id in _core.process_set_ids():
        if ps_id != 0 and list(_core.process_set_ranks(ps_id)) == process_set.ranks:
            raise ValueError('Attempted to add a duplicate process set: {}'.format(process_set))
    if process_set.ranks == list(range(_core.size())):
        raise ValueError('Attempted to add a duplicate process set: {}'.format(process_set))
    ps_id = _core.add_process_set(process_set.ranks)
    process_set.process_set_id = ps_id
    _registry[ps_id] = process_set
    return process_set


def remove_process_set(process_set):
    """Collective: removes a registered process set. Returns False for the global set or an
    unregistered set; otherwise invalidates ``process_set`` and returns True."""
    if _core is None or not _core.is_initialized():
        raise ValueError(NOT_INITIALIZED_MESSAGE)
    if not _dynamic_enabled():
        raise ValueError('Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow removing process sets after '
                         'Horovod initialization.')
    ps_id = process_set.process_set_id
    if ps_id is None or ps_id == 0:
        return False
    removed = _core.remove_process_set(ps_id)
    if removed:
        _registry.pop(ps_id, None)
        process_set._invalidate()
    return removed
