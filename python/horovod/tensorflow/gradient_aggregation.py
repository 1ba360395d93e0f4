"""Local gradient aggregation for TF1-style graphs: ``backward_passes_per_step`` > 1.

Each run of the ``compute_gradients`` ops adds this pass's gradients to local accumulators and
counts the pass. On the N-th pass the accumulated gradients (divided by N when
``average_aggregated_gradients``) are reduced across ranks and the ``apply_gradients`` op applies
them and clears the accumulators; on the other passes it applies nothing (it only advances
``global_step``, so step-counting hooks keep counting passes). Every rank runs the same number of
passes, so the reductions match.

The accumulators and the counter are local variables (``tf.compat.v1.local_variables_initializer``
or a ``MonitoredTrainingSession`` initializes them). Graph mode only: eager code should aggregate
with a Keras optimizer or in its own loop.

``averaged_over_passes`` and ``gradients_of_pass`` are shared with the tf-keras optimizer's own
aggregation (``horovod._keras.optimizer``), which counts passes differently (Horovod's
``_agg_helper.counter`` cycles 0..n-1 there).
"""

import tensorflow as tf

from horovod.common.process_sets import global_process_set


def averaged_over_passes(values, passes, average):
    """``values`` divided by the pass count when ``average`` (average_aggregated_gradients)."""
    if not average:
        return values
    return [v / tf.cast(passes, v.dtype) for v in values]


def gradients_of_pass(count, passes, present, num_grads, reduce_fn, local_fn):
    """The gradients one pass returns: ``reduce_fn()`` when ``count`` equals ``passes`` (the
    pass that reduces), else ``local_fn()``, each a list of the gradients at the positions
    ``present``; placed back at those positions in a list of ``num_grads`` (None elsewhere)."""
    if present:
        out = tf.cond(tf.equal(count, passes), reduce_fn, local_fn)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
    else:
        out = []
    result = [None] * num_grads
    for i, g in zip(present, out):
        result[i] = g
    return result


class LocalGradientAggregationHelper:
    """Aggregates gradients locally for ``backward_passes_per_step`` passes, then reduces them
    with ``allreduce_func(grads, vars) -> grads``."""

    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense,
                 average_aggregated_gradients, process_set=global_process_set):
        if backward_passes_per_step <= 0:
            raise ValueError('backward_passes_per_step must be > 0')
        if tf.executing_eagerly():
            raise ValueError('LocalGradientAggregationHelper builds graph ops: use it in a '
                             'TF1-style graph (tf.compat.v1), not eagerly.')
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_func = allreduce_func
        self._sparse_as_dense = sparse_as_dense
        self._average = average_aggregated_gradients
        self._process_set = process_set
        self.counter = None
        self._accumulators = {}  # index of the gradient -> local variable

    def _local_variable(self, name, initial):
        return tf.compat.v1.Variable(initial, name=name, trainable=False,
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                     use_resource=True)

    def _build(self, grads):
        with tf.compat.v1.variable_scope('aggregation_variables'):
            self.counter = self._local_variable('aggregation_counter', tf.constant(0, tf.int32))
            for i, g in enumerate(grads):
                if g is None:
                    continue
                shape = g.dense_shape if isinstance(g, tf.IndexedSlices) else tf.shape(g)
                dtype = g.dtype
                static = tf.get_static_value(shape)
                if static is None:
                    raise ValueError('Local gradient aggregation needs gradients of a static '
                                     'shape.')
                self._accumulators[i] = self._local_variable(
                    'aggregation_{}'.format(i), tf.zeros([int(d) for d in static], dtype))

    def compute_gradients(self, grads, vars):
        """Ops that add ``grads`` to the accumulators and return the reduced aggregate on every
        N-th pass (the unreduced aggregate otherwise, which ``apply_gradients`` ignores)."""
        grads = list(grads)
        if self.counter is None:
            self._build(grads)
        updates = []
        for i, g in enumerate(grads):
            if g is None:
                continue
            updates.append(self._accumulators[i].assign_add(tf.convert_to_tensor(g)))
        with tf.control_dependencies(updates):
            count = self.counter.assign_add(1)
        n = self.backward_passes_per_step
        present = [i for i, g in enumerate(grads) if g is not None]

        def aggregated():
            values = [self._accumulators[i].read_value() for i in present]
            return averaged_over_passes(values, n, self._average)

        def reduce_now():
            values = aggregated()
            return self._allreduce_func(values, [vars[i] for i in present])

        with tf.control_dependencies([count]):
            return gradients_of_pass(count, n, present, len(grads), reduce_now, aggregated)

    def apply_gradients(self, apply_grads_closure, grads_and_vars, global_step=None):
        """An op applying the gradients (``apply_grads_closure()``) on every N-th pass and
        clearing the accumulators; on other passes only ``global_step`` advances."""
        deps = [g for g, _ in grads_and_vars if g is not None]
        with tf.control_dependencies(deps):
            ready = tf.equal(self.counter.read_value(), self.backward_passes_per_step)

            def apply():
                op = apply_grads_closure()
                with tf.control_dependencies([op]):
                    resets = [acc.assign(tf.zeros_like(acc)) for acc in
                              self._accumulators.values()]
                    resets.append(self.counter.assign(0))
                return tf.group(*resets)

            def skip():
                if global_step is None:
                    return tf.group(tf.no_op())
                return tf.group(tf.compat.v1.assign_add(global_step, 1))

            return tf.cond(ready, apply, skip)
