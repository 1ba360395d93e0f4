"""Variable broadcasting and object collectives for TensorFlow."""

import tensorflow as tf

from horovod.common import objects as _objects
from horovod.common import ops as _ops
from horovod.common.process_sets import global_process_set
from horovod.tensorflow import _execute
from horovod.tensorflow import mpi_ops as _mpi


def _variable_names(variables, prefix):
    """Core names for broadcasting ``variables``: position and variable name, identical on
    every rank that builds the same model."""
    return ['{}{}.{}'.format(prefix, i, _mpi._normalize_name(getattr(v, 'name', 'var')))
            for i, v in enumerate(variables)]

def _broadcast_values(variables, root_rank, process_set, prefix):
    psid = _mpi._ps_id(process_set)
    names = [_ops.BROADCAST + n for n in _variable_names(variables, prefix)]
    values = [tf.convert_to_tensor(v) for v in variables]
    return _execute.broadcast_many(values, root_rank, names, psid)

def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns root's values to ``variables`` on every rank of ``process_set`` (all in flight
    together). Eagerly it returns None; in a graph it returns the group op doing the
    assignments. ``inplace`` is accepted for compatibility (the values are assigned either
    way)."""
    variables = list(variables)
    values = _broadcast_values(variables, root_rank, process_set, 'broadcast_variables.')
    assigns = [v.assign(x) for v, x in zip(variables, values)]
    if tf.executing_eagerly():
        return None
    return tf.group(*assigns)

def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast of ``variables`` from ``root_rank``; returns their new values."""
    variables = list(variables)
    prefix = (name or 'broadcast_') + '.'
    values = _broadcast_values(variables, root_rank, process_set, prefix)
    for v, x in zip(variables, values):
        v.assign(x)
    return values

def broadcast_global_variables(root_rank):
    """TF1 graphs: an op that broadcasts every global variable from ``root_rank``."""
    if tf.executing_eagerly():
        raise RuntimeError('hvd.broadcast_global_variables() does not support eager execution. '
                           'Please use `hvd.broadcast_variables(<model/optimizer variables>)` '
                           'instead.')
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)

def _numpy_collectives(session, process_set):
    """(broadcast_, allgather) over numpy arrays for horovod.common.objects, run eagerly or
    through ``session`` in a TF1 graph."""
    def run(t):
        if tf.executing_eagerly():
            return t.numpy()
        return (session or tf.compat.v1.get_default_session()).run(t)

    def broadcast_(array, root_rank, name):
        return run(_mpi.broadcast(tf.convert_to_tensor(array), root_rank, name=name,
                                  process_set=process_set))

    def allgather(array, name):
        return run(_mpi.allgather(tf.convert_to_tensor(array), name=name,
                                  process_set=process_set))

    return broadcast_, allgather

def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns root's (picklable) ``obj`` on every rank of the set."""
    broadcast_, _ = _numpy_collectives(session, process_set)
    return _objects.broadcast_object(obj, root_rank, _objects.default_name(obj, name),
                                     _mpi.rank(), broadcast_)

def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function ``fn(obj)`` broadcasting ``obj`` from ``root_rank`` (Horovod's TF1 helper that
    built its placeholders once; here every call runs the collectives directly)."""
    def fn(obj):
        return broadcast_object(obj, root_rank, session=session, name=name or 'broadcast_object_fn',
                                process_set=process_set)
    return fn

def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every set rank's (picklable) ``obj``, in set-rank order."""
    _, allgather = _numpy_collectives(session, process_set)
    return _objects.allgather_object(obj, _objects.default_name(obj, name), allgather)

