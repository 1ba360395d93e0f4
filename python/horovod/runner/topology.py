"""Rank assignment for workers that a framework placed for us (Ray actors, Spark tasks), the way
``horovodrun`` assigns them to its slots: ranks go host by host, hosts in the order in which
they first appear among the workers (so worker 0's host is first), and within a host in worker
order. ``cross_rank`` counts the hosts that have a worker of the same local rank.
"""

import collections

__all__ = ['Slot', 'assign_slots', 'slot_environment']

Slot = collections.namedtuple('Slot', 'rank size local_rank local_size cross_rank cross_size host')


def assign_slots(hosts):
    """``hosts[i]`` is the host key of worker ``i`` (any hashable; equal keys share a host).
    Returns ``slots`` with ``slots[i]`` the Slot of worker ``i``."""
    by_host = collections.OrderedDict()
    for index, host in enumerate(hosts):
        by_host.setdefault(host, []).append(index)
    size = len(hosts)
    slots = [None] * size
    hosts_with_local_rank = collections.Counter()
    rank = 0
    for host, workers in by_host.items():
        for local_rank, index in enumerate(workers):
            cross_rank = hosts_with_local_rank[local_rank]
            hosts_with_local_rank[local_rank] += 1
            slots[index] = [rank, size, local_rank, len(workers), cross_rank, None, host]
            rank += 1
    for slot in slots:
        slot[5] = hosts_with_local_rank[slot[2]]
    return [Slot(*slot) for slot in slots]


def slot_environment(slot, hostname, rendezvous_addr, rendezvous_port, secret):
    """The ``HOROVOD_*`` variables that make a process rank ``slot.rank`` of the job whose
    rendezvous server listens on ``rendezvous_addr:rendezvous_port`` with ``secret``."""
    return {
        'HOROVOD_HOSTNAME': str(hostname),
        'HOROVOD_RANK': str(slot.rank),
        'HOROVOD_SIZE': str(slot.size),
        'HOROVOD_LOCAL_RANK': str(slot.local_rank),
        'HOROVOD_LOCAL_SIZE': str(slot.local_size),
        'HOROVOD_CROSS_RANK': str(slot.cross_rank),
        'HOROVOD_CROSS_SIZE': str(slot.cross_size),
        'HOROVOD_GLOO_RENDEZVOUS_ADDR': str(rendezvous_addr),
        'HOROVOD_GLOO_RENDEZVOUS_PORT': str(rendezvous_port),
        'HOROVOD_CONTROLLER': 'gloo',
        'HOROVOD_CPU_OPERATIONS': 'gloo',
        'HOROVOD_SECRET_KEY': secret,
    }
