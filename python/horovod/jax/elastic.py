"""Elastic training for JAX: ``hvd.elastic.run`` and ``JaxState``.

JAX values are immutable pytrees, so a commit keeps references (no copy) and a restore puts them
back; ``sync`` broadcasts rank 0's committed values (array leaves as arrays, the rest pickled).
"""

import jax

from horovod.common.elastic import ObjectState, run_fn
from horovod.jax import mpi_ops
from horovod.jax.functions import broadcast_object, broadcast_parameters


def _is_array_tree(value):
    leaves = jax.tree_util.tree_leaves(value)
    return bool(leaves) and all(isinstance(leaf, jax.Array) for leaf in leaves)


class JaxState(ObjectState):
    """Elastic state for JAX: every keyword argument (``params=``, ``opt_state=``, counters...)
    becomes an attribute; ``commit()`` saves them, ``restore()`` returns to the last commit,
    ``sync()`` gives every rank rank 0's last commit."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=broadcast_object, get_rank=mpi_ops._core.rank, **kwargs)

    def sync(self):
        synced = {}
        for key in sorted(self._saved_state):
            value = self._saved_state[key]
            if _is_array_tree(value):
                synced[key] = broadcast_parameters(value, root_rank=0,
                                                   prefix='elastic.{}.'.format(key))
            else:
                synced[key] = broadcast_object(value, root_rank=0, name='elastic.' + key)
        self._saved_state = synced
        self._set_attrs()


def run(func):
    """Decorator for elastic training: ``func(state, *args, **kwargs)`` is retried after a
    failure (state restored to the last commit, Horovod re-initialized, state synced from rank
    0) and after host changes."""
    return run_fn(func, _reset)


def _reset():
    mpi_ops.shutdown()
    mpi_ops.init()
