"""What every framework adapter shares about collectives: the reduction op constants and the
naming rule that matches one rank's collective with the other ranks'.

Reduction ops: the values the core's ``ReduceOp`` takes (``horovod._core`` receives them as
integers), exported by each adapter under Horovod's names (``hvd.Average``, ``hvd.Sum``, ...).

Naming: a collective's name is its matching key across ranks, ``<prefix><name>``, where the
prefix names the operation (``allreduce.``, ``allgather.``, ...). An unnamed call gets
``<prefix>noname.<handle>``, ``handle`` being the adapter's handle counter (reset by init and
shutdown), so unnamed calls match only when every rank issues the same sequence of them. Such a
generated name never comes back: adapters pass ``one_off=True`` for it, which keeps it out of the
core's response cache, where it would only push out the names that recur every step.
``_core.HandleSpace.allreduce`` applies this same rule in C++ on the per-tensor fast path; it is
given ``UNNAMED`` and its prefix when an adapter creates its space.
"""

# Reduction ops.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5



def check_adasum(op, process_set_id, job_size, gpu=False, local_size=None, homogeneous=None):
    """Horovod's refusals of Adasum, raised on the calling rank before anything is sent: a process
    set other than the global one, or a rank count that is not a power of two (``job_size()``:
    the job's ranks, asked only for Adasum, so that other ops report their own errors, e.g.
    before init). Other ops pass.

    GPU tensors (``gpu``) run Horovod's GPU Adasum (an average inside each host, Adasum across
    hosts), whose conditions are on hosts instead: the same number of ranks on every host
    (``homogeneous()``) and a power-of-two number of hosts (``job_size() // local_size()``)."""
    if op != Adasum:
        return
    if process_set_id != 0:
        raise NotImplementedError('Adasum does not support non-global process sets yet.')
    if gpu:
        if not homogeneous():
            raise NotImplementedError('Running GPU Adasum on heterogeneous cluster is not '
                                      'supported yet.')
        hosts = job_size() // local_size()
        if hosts <= 0 or hosts & (hosts - 1):
            raise NotImplementedError('Running GPU Adasum with non-power of 2 nodes is not '
                                      'supported yet.')
        return
    size = job_size()
    if size <= 0 or size & (size - 1):
        raise NotImplementedError('Running Adasum with non-power of 2 ranks is not supported yet.')


# Prefixes of the operations' names.
ALLREDUCE = 'allreduce.'
GROUPED_ALLREDUCE = 'grouped_allreduce.'
ALLGATHER = 'allgather.'
GROUPED_ALLGATHER = 'grouped_allgather.'
BROADCAST = 'broadcast.'
ALLTOALL = 'alltoall.'
REDUCESCATTER = 'reducescatter.'
GROUPED_REDUCESCATTER = 'grouped_reducescatter.'

# What follows the prefix of an unnamed call, before its handle.
UNNAMED = 'noname.'


def op_name(prefix, name, handle):
    """The full name of a collective: ``prefix + name``, or ``prefix + 'noname.<handle>'`` when
    ``name`` is None or empty (then the name is one-off: see the module docstring)."""
    return prefix + name if name else prefix + UNNAMED + str(handle)
