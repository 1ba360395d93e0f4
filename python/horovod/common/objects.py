"""Broadcasting and gathering arbitrary picklable objects (cloudpickle), framework-neutral.

The adapter passes collectives working on numpy arrays (it wraps them into its own tensors
without copying, so its naming and handle rules apply):
  broadcast_(array, root_rank, name) -> array   in place on non-roots
  allgather(array, name) -> array
Wire format (Horovod's): an int32 [n] length under ``<name>.sz``, then n uint8 under ``<name>.t``.
"""

import cloudpickle
import numpy as np


def default_name(obj, name):
    return type(obj).__name__ if name is None else name


def broadcast_object(obj, root_rank, name, rank, broadcast_):
    """Returns root's object on every rank (root gets its own object back unchanged)."""
    if rank == root_rank:
        payload = bytearray(cloudpickle.dumps(obj))
        size = np.array([len(payload)], dtype=np.int32)
        broadcast_(size, root_rank, name + '.sz')
        buf = np.frombuffer(payload, dtype=np.uint8)
        broadcast_(buf, root_rank, name + '.t')
        return obj
    size = np.zeros(1, dtype=np.int32)
    size = broadcast_(size, root_rank, name + '.sz')
    buf = np.empty(int(np.asarray(size).reshape(-1)[0]), dtype=np.uint8)
    buf = broadcast_(buf, root_rank, name + '.t')
    return cloudpickle.loads(np.asarray(buf).tobytes())


def allgather_object(obj, name, allgather):
    """Returns the list of every rank's object, in rank order."""
    payload = bytearray(cloudpickle.dumps(obj))
    sizes = np.asarray(allgather(np.array([len(payload)], dtype=np.int32), name + '.sz'))
    gathered = np.asarray(allgather(np.frombuffer(payload, dtype=np.uint8), name + '.t'))
    result = []
    start = 0
    for n in sizes.reshape(-1).tolist():
        result.append(cloudpickle.loads(gathered[start:start + n].tobytes()))
        start += n
    return result
