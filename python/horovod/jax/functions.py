"""Pytree and object helpers for JAX: broadcast_parameters, broadcast_object, allgather_object."""

import jax
import numpy as np

from horovod.common import objects
from horovod.common.process_sets import global_process_set
from horovod.jax import mpi_ops


def broadcast_parameters(params, root_rank=0, prefix=None, process_set=global_process_set):
    """Returns the pytree ``params`` with rank ``root_rank``'s values on every rank (same
    structure; every leaf must have the same shape and dtype on every rank). The leaves are
    broadcast by their pytree path (``prefix`` + path), all in flight together. Eager only."""
    leaves_with_path, treedef = jax.tree_util.tree_flatten_with_path(params)
    if any(isinstance(leaf, jax.core.Tracer) for _, leaf in leaves_with_path):
        mpi_ops._refuse_in_jit('broadcast_parameters')
    ps_id = mpi_ops._psid(process_set)
    works, bufs, dtypes = [], [], []
    for path, leaf in leaves_with_path:
        x = mpi_ops._check(leaf)
        dtypes.append(x.dtype)
        buf = np.array(mpi_ops._wire_move(x), copy=True, order='C')
        name = (prefix or '') + 'param' + jax.tree_util.keystr(path)
        full, one_off = mpi_ops._name('broadcast.', name)
        works.append(mpi_ops._core.broadcast_async(buf, root_rank, full, ps_id, one_off))
        bufs.append(buf)
    for w in works:
        w.wait()
    out = [mpi_ops._unwire(mpi_ops._to_jax(b), d) for b, d in zip(bufs, dtypes)]
    return jax.tree_util.tree_unflatten(treedef, out)


def _broadcast_np(array, root_rank, full_name):
    buf = np.array(array, copy=True, order='C')
    full, one_off = mpi_ops._name('broadcast.', full_name)
    mpi_ops._wait(mpi_ops._core.broadcast_async(buf, root_rank, full, 0, one_off))
    return buf


def _allgather_np(array, full_name):
    full, one_off = mpi_ops._name('allgather.', full_name)
    work = mpi_ops._wait(mpi_ops._core.allgather_async(np.ascontiguousarray(array), full, 0,
                                                       one_off))
    return np.array(np.from_dlpack(work.outputs()[0]), copy=True)


def broadcast_object(obj, root_rank=0, name=None):
    """Returns rank ``root_rank``'s picklable ``obj`` on every rank (cloudpickle). Eager only."""
    return objects.broadcast_object(obj, root_rank, objects.default_name(obj, name),
                                    mpi_ops._core.rank(), _broadcast_np)


def allgather_object(obj, name=None):
    """Returns the list of every rank's picklable ``obj``, in rank order. Eager only."""
    return objects.allgather_object(obj, objects.default_name(obj, name), _allgather_np)
