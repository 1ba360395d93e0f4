"""The options of a Keras ``DistributedOptimizer``, validated once, and the reduction of one
step's gradients that every optimizer flavour (Keras 3, tf-keras) shares.

A ``ReduceSettings`` is a plain object (not trackable by Keras or TensorFlow), so nothing it
holds is saved with the model: a model trained with Horovod saves and loads like one trained
without it.
"""

import itertools
import os

from horovod.common.ops import Average, Sum
from horovod.common.gradient_groups import check_variable_groups, group_indices
from horovod.common.optimizer_args import check_optimizer_args
from horovod.common.process_sets import global_process_set

_instances = itertools.count()


def _is_variable(obj):
    return hasattr(obj, 'assign') and hasattr(obj, 'shape')


def _is_sparse(grad):
    return type(grad).__name__ == 'IndexedSlices'


class ReduceSettings:
    """Validated DistributedOptimizer options plus per-optimizer reduction state.

    ``backend`` is a ``KerasBackend``; ``groups`` is None, a positive int (contiguous split of
    the gradients into that many grouped calls) or a list of lists of variables (each list one
    grouped call; every other gradient goes alone).
    """

    def __init__(self, backend, compression, sparse_as_dense, gradient_predivide_factor, op,
                 backward_passes_per_step, average_aggregated_gradients, num_groups, groups,
                 process_set, scale_local_gradients, device_dense='', device_sparse=''):
        if (device_dense or device_sparse) and backend.name != 'tensorflow':
            raise ValueError('device_dense/device_sparse name TensorFlow devices; with Keras on '
                             'the {} backend, leave them empty (gradients are reduced where the '
                             'backend keeps them)'.format(backend.name))
        if op not in (Average, Sum):
            raise ValueError('op currently only supports Average and Sum')
        groups = check_optimizer_args(op, gradient_predivide_factor, num_groups, groups,
                                      backward_passes_per_step)
        check_variable_groups(groups, _is_variable)
        self.backend = backend
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.predivide = gradient_predivide_factor
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.groups = groups
        self.process_set = process_set
        # TensorFlow backend only (checked above): where the reduction ops run.
        self.device_kwargs = ({'device_dense': device_dense, 'device_sparse': device_sparse}
                              if device_dense or device_sparse else {})
        self.scale_local_gradients = scale_local_gradients
        self.local_vars = set()
        self.name = 'DistributedOptimizer_{}'.format(next(_instances))
        self.accumulators = {}  # id(variable) -> backend variable (local aggregation)
        # JAX with local aggregation: how many optimizer variables precede the accumulators
        # (the ones saved with the model); None elsewhere.
        self.saved_variable_count = None

    # ---- when to reduce --------------------------------------------------------------------

    def _set_size(self):
        ps = self.process_set
        if ps.process_set_id == 0 or ps is global_process_set:
            from horovod.common import basics
            return basics._require_core().size()
        return ps.size()

    def active(self):
        """Whether this rank reduces: a member of the set, and a set of more than one rank
        (or an elastic job, whose size may grow)."""
        if not self.process_set.included():
            return False
        return self._set_size() > 1 or os.environ.get('HOROVOD_ELASTIC') == '1'

    # ---- reduction -------------------------------------------------------------------------

    def _scale(self):
        """(prescale, postscale) for the core; Average's 1/size is applied by the core."""
        if self.op == Average and self.predivide != 1.0:
            return 1.0 / self.predivide, self.predivide
        return 1.0, 1.0

    def reduce(self, grads, variables):
        """Allreduces one step's gradients (None stays None): one grouped call per group,
        local variables' gradients kept local (scaled by 1/set size when
        ``scale_local_gradients``). Returns the list of reduced gradients."""
        grads = list(grads)
        if self.sparse_as_dense:
            grads = [self._densify(g) for g in grads]
        if not self.active():
            return grads
        local = [i for i, v in enumerate(variables)
                 if id(v) in self.local_vars and grads[i] is not None]
        for i in local:
            if self.scale_local_gradients:
                grads[i] = grads[i] / self._set_size()
        to_reduce = [None if id(v) in self.local_vars else g for g, v in zip(grads, variables)]
        prescale, postscale = self._scale()
        reducer = self.backend.reducer
        for n, group in enumerate(group_indices(to_reduce, variables, self.groups)):
            compressed, ctxs = [], []
            for i in group:
                if _is_sparse(grads[i]):
                    compressed.append(grads[i])
                    ctxs.append(None)
                else:
                    c, ctx = self.compression.compress(grads[i])
                    compressed.append(c)
                    ctxs.append(ctx)
            reduced = reducer(compressed, '{}.g{}'.format(self.name, n), self.op, prescale,
                              postscale, self.process_set, **self.device_kwargs)
            for i, r, ctx in zip(group, reduced, ctxs):
                grads[i] = r if _is_sparse(r) else self.compression.decompress(r, ctx)
        return grads

    @staticmethod
    def _densify(grad):
        if _is_sparse(grad):
            import tensorflow as tf
            return tf.convert_to_tensor(grad)
        return grad
