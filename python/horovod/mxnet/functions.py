"""broadcast_parameters (dicts and Gluon ParameterDicts, deferred initialisation included),
broadcast_object and allgather_object for MXNet."""

import types

import mxnet as mx


from horovod.common import objects
from horovod.mxnet import mpi_ops


def _broadcast_on_init(param, root_rank, name):
    """Wraps ``param._init_impl`` so that the values it initialises are broadcast from
    ``root_rank`` right away (for parameters whose shape is known only at the first forward)."""
    init_impl = param._init_impl

    def wrapped(self, *args, **kwargs):
        init_impl(*args, **kwargs)
        mpi_ops.broadcast_(self.data(), root_rank=root_rank, name=name)
        self.data().wait_to_read()
    return types.MethodType(wrapped, param)


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Overwrites ``params`` (a dict of NDArrays or a Gluon ``ParameterDict``) with rank
    ``root_rank``'s values, in sorted key order, under the names ``prefix + key``. Parameters
    whose initialisation is deferred are broadcast when they get initialised. A no-op with one
    rank."""
    if mpi_ops.size() == 1:
        return
    prefix = prefix or ''
    tensors, names = [], []
    if isinstance(params, dict):
        for key in sorted(params):
            tensors.append(params[key])
            names.append(prefix + str(key))
    elif isinstance(params, mx.gluon.parameter.ParameterDict):
        for key, param in sorted(params.items()):
            try:
                tensors.append(param.data())
                names.append(prefix + str(key))
            except mx.gluon.parameter.DeferredInitializationError:
                param._init_impl = _broadcast_on_init(param, root_rank, prefix + str(key))
    else:
        raise ValueError('invalid params of type: %s' % type(params))
    for tensor, name in zip(tensors, names):
        mpi_ops.broadcast_(tensor, root_rank, name=name)
    for tensor in tensors:
        tensor.wait_to_read()


def _broadcast_np(array, root_rank, full_name):
    out = mpi_ops.broadcast_(mx.nd.array(array, dtype=array.dtype), root_rank, name=full_name)
    return out.asnumpy()


def _allgather_np(array, full_name):
    return mpi_ops.allgather(mx.nd.array(array, dtype=array.dtype), name=full_name).asnumpy()


def broadcast_object(obj, root_rank=0, name=None):
    """Returns rank ``root_rank``'s picklable ``obj`` on every rank (cloudpickle)."""
    return objects.broadcast_object(obj, root_rank, objects.default_name(obj, name),
                                    mpi_ops.rank(), _broadcast_np)


def allgather_object(obj, name=None):
    """Returns the list of every rank's picklable ``obj``, in rank order."""
    return objects.allgather_object(obj, objects.default_name(obj, name), _allgather_np)



