"""``DistributedOptimizer`` for Keras: a new optimizer of a dynamic subclass of the user's
optimizer class, with the same class name and module, built with
``cls.from_config(optimizer.get_config())`` (the passed instance's slot state is not carried
over). Its config is the plain optimizer's, so a model saved with it loads without Horovod.

Where the gradients are reduced:

* Keras 3 (every backend): ``apply(grads, trainable_variables)``, which ``apply_gradients``,
  every backend's ``model.fit`` step, and the JAX trainer's ``stateless_apply`` all go through.
* tf-keras 2 (current and ``legacy`` optimizers), as in Horovod: ``_compute_gradients`` /
  ``compute_gradients`` (which ``minimize``, and so ``model.fit``, call), ``_allreduce`` and
  ``get_gradients``; ``apply_gradients`` then applies what it is given. An optimizer none of
  those was called on reduces in ``apply_gradients`` (custom loops with their own tape).

With ``backward_passes_per_step = n > 1`` gradients are summed locally (in variables kept out of
the optimizer's saved state) and reduced and applied every n-th call; the calls in between only
advance ``iterations``. On tf-keras this is Horovod's ``_agg_helper`` (its ``counter`` counts the
passes since the last allreduce); on Keras 3 ``_agg_helper`` is a view of ``iterations``. On JAX
the train step is stateless and compiled, so the sums live in optimizer variables (left out of
``save_own_variables``), the reduction sits in a ``lax.cond`` and the update is computed every
call and kept only on the n-th (as Keras's own gradient accumulation does on JAX).
"""

from horovod._keras.settings import ReduceSettings
from horovod.common.error_feedback import ErrorFeedbackCompressor

_class_cache = {}


class _DistributedMixin:
    """Shared by both flavours; ``self._hvd`` is the ReduceSettings."""

    def register_local_var(self, var):
        """Keeps ``var``'s gradient local (not reduced across ranks)."""
        self._hvd.local_vars.add(id(var))

    def _hvd_accumulator(self, var):
        acc = self._hvd.accumulators.get(id(var))
        if acc is None:
            acc = self._hvd_new_accumulator(var)
            self._hvd.accumulators[id(var)] = acc
        return acc

    def _hvd_summed(self, grads, variables, ops):
        """Accumulated + current gradients (averaged over the passes when asked)."""
        n = self._hvd.backward_passes_per_step
        out = []
        for g, v in zip(grads, variables):
            if g is None:
                out.append(None)
                continue
            total = self._hvd_accumulator(v) + ops.convert_to_tensor(g)
            if self._hvd.average_aggregated_gradients:
                total = total / n
            out.append(total)
        return out

    def _hvd_accumulate(self, grads, variables):
        for g, v in zip(grads, variables):
            if g is not None:
                acc = self._hvd_accumulator(v)
                acc.assign(acc + g)

    def _hvd_clear(self, variables):
        for v in variables:
            acc = self._hvd.accumulators.get(id(v))
            if acc is not None:
                acc.assign(acc * 0)


class Keras3DistributedMixin(_DistributedMixin):
    """Placed before the user's Keras 3 optimizer class."""

    def _hvd_tracks_accumulators(self):
        hvd = getattr(self, '_hvd', None)
        return hvd is not None and hvd.backend.name == 'jax' and hvd.backward_passes_per_step > 1

    def build(self, variables):
        super().build(variables)
        if self._hvd_tracks_accumulators() and self._hvd.saved_variable_count is None:
            self._hvd.saved_variable_count = len(self.variables)
            for v in variables:
                self._hvd.accumulators[id(v)] = self.add_variable_from_reference(
                    v, name='hvd_accumulator')

    def save_own_variables(self, store):
        """The plain optimizer's variables only (a saved model loads without Horovod)."""
        count = getattr(getattr(self, '_hvd', None), 'saved_variable_count', None)
        if count is None:
            return super().save_own_variables(store)
        for i, variable in enumerate(self.variables[:count]):
            store[str(i)] = variable.numpy()

    def load_own_variables(self, store):
        count = getattr(getattr(self, '_hvd', None), 'saved_variable_count', None)
        if count is None or len(store.keys()) != count:
            return super().load_own_variables(store)
        for i, variable in enumerate(self.variables[:count]):
            variable.assign(store[str(i)])

    @property
    def _agg_helper(self):
        """None without local aggregation; else a view whose ``counter`` is the number of
        backward passes since the last allreduce (``iterations`` mod ``backward_passes_per_step``
        here: every pass advances ``iterations``)."""
        hvd = getattr(self, '_hvd', None)
        if hvd is None or hvd.backward_passes_per_step == 1:
            return None
        return _Keras3AggregationView(self)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        raise NotImplementedError(
            'Keras 3 optimizers do not compute gradients (Horovod\'s _compute_gradients belongs '
            'to tf-keras 2 optimizers, TF_USE_LEGACY_KERAS=1). Compute them with your backend '
            '(e.g. tf.GradientTape) and call apply_gradients / apply, which allreduces them, or '
            'use horovod.tensorflow.DistributedGradientTape.')

    def _hvd_new_accumulator(self, var):
        if self._hvd_tracks_accumulators():
            raise RuntimeError('JAX accumulators are created by build(); {} has none'.format(
                getattr(var, 'path', var)))
        keras = self._hvd.backend.keras
        return keras.Variable(keras.ops.zeros(var.shape, dtype=var.dtype), trainable=False,
                              name='hvd_accumulator')

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if not grads:
            return super().apply(grads, trainable_variables)
        if trainable_variables is None:
            if not self.built:
                return super().apply(grads, trainable_variables)  # raises Keras's error
            variables = list(self._trainable_variables)
        else:
            variables = list(trainable_variables)
            if not self.built:
                with self._hvd.backend.keras.name_scope(self.name, caller=self):
                    self.build(variables)
                self.built = True
        if self._hvd.backward_passes_per_step == 1:
            return super().apply(self._hvd.reduce(grads, variables), trainable_variables)
        return self._hvd_apply_aggregated(grads, variables, trainable_variables)

    def _hvd_apply_aggregated(self, grads, variables, trainable_variables):
        if self._hvd_tracks_accumulators():
            return self._hvd_apply_aggregated_stateless(grads, variables, trainable_variables)
        keras = self._hvd.backend.keras
        n = self._hvd.backward_passes_per_step
        grads = [None if g is None else keras.ops.convert_to_tensor(g) for g in grads]
        for v, g in zip(variables, grads):  # create outside the conditional
            if g is not None:
                self._hvd_accumulator(v)

        def boundary():
            summed = self._hvd_summed(grads, variables, keras.ops)
            super(Keras3DistributedMixin, self).apply(self._hvd.reduce(summed, variables),
                                                      trainable_variables)
            self._hvd_clear(variables)

        def between():
            self._hvd_accumulate(grads, variables)
            self._iterations.assign_add(1)

        keras.ops.cond((self._iterations + 1) % n == 0, boundary, between)


    def _hvd_apply_aggregated_stateless(self, grads, variables, trainable_variables):
        """JAX: no variable may be assigned inside a conditional of the compiled step, so the
        reduction is the only conditional part (it returns values) and the update is computed
        every call, then kept or discarded with a select."""
        import jax
        import jax.numpy as jnp
        n = self._hvd.backward_passes_per_step
        is_boundary = (self._iterations.value + 1) % n == 0
        present = [i for i, g in enumerate(grads) if g is not None]
        totals = [self._hvd.accumulators[id(variables[i])].value + grads[i] for i in present]
        to_apply = [t / n for t in totals] if self._hvd.average_aggregated_gradients else totals

        def reduce(values):
            full = [None] * len(grads)
            for i, value in zip(present, values):
                full[i] = value
            reduced = self._hvd.reduce(full, variables)
            return [reduced[i] for i in present]

        reduced = jax.lax.cond(is_boundary, reduce, lambda values: list(values), to_apply)
        full = [None] * len(grads)
        for i, value in zip(present, reduced):
            full[i] = value
        accumulators = set(id(a) for a in self._hvd.accumulators.values())
        kept = [v for v in list(variables) + self.variables if id(v) not in accumulators]
        old = [v.value for v in kept]
        old_iterations = self._iterations.value
        super(Keras3DistributedMixin, self).apply(full, trainable_variables)
        for v, before in zip(kept, old):
            v.assign(jnp.where(is_boundary, v.value, before))
        self._iterations.assign(old_iterations + 1)
        for i, total in zip(present, totals):
            acc = self._hvd.accumulators[id(variables[i])]
            acc.assign(jnp.where(is_boundary, jnp.zeros_like(total), total))


class _Keras3AggregationView:
    """``_agg_helper`` of a Keras 3 DistributedOptimizer with local aggregation."""

    def __init__(self, optimizer):
        self._optimizer = optimizer
        self.backward_passes_per_step = optimizer._hvd.backward_passes_per_step
        self.average_aggregated_gradients = optimizer._hvd.average_aggregated_gradients

    @property
    def counter(self):
        return self._optimizer.iterations % self.backward_passes_per_step


class _TfKerasAggregationHelper:
    """Local gradient aggregation of a tf-keras ``DistributedOptimizer`` with
    ``backward_passes_per_step = n > 1`` (the optimizer's ``_agg_helper``), with the meaning of
    Horovod's helper: ``counter`` is a ``tf.Variable`` holding the backward passes since the last
    allreduce (0 right after one, so it cycles 0..n-1 from step to step).

    ``compute_gradients`` adds a pass's gradients to local sums and counts it; on the n-th pass
    it returns the reduced sums (divided by n when ``average_aggregated_gradients``), clears them
    and resets ``counter`` to 0; on the other passes it returns the local sums unreduced.
    ``apply_gradients`` applies only when ``counter`` is 0 (a pass that just reduced); otherwise
    it only advances the optimizer's ``iterations``.

    A plain object (not trackable): its variables are not saved with the model, and a saved
    model loads without Horovod.
    """

    def __init__(self, settings, owner):
        import tensorflow as tf
        self.backward_passes_per_step = settings.backward_passes_per_step
        self.average_aggregated_gradients = settings.average_aggregated_gradients
        self._settings = settings
        self._owner = owner
        with tf.init_scope():
            self.counter = tf.Variable(0, trainable=False, dtype=tf.int32,
                                       name='hvd_aggregation_counter')

    def register_local_var(self, var):
        self._owner.register_local_var(var)

    def compute_gradients(self, grads, variables):
        import tensorflow as tf

        from horovod.tensorflow.gradient_aggregation import (averaged_over_passes,
                                                             gradients_of_pass)
        n = self.backward_passes_per_step
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        variables = list(variables)
        present = [i for i, g in enumerate(grads) if g is not None]
        sums = [self._owner._hvd_accumulator(variables[i]) for i in present]
        updates = [acc.assign_add(grads[i], read_value=False) for acc, i in zip(sums, present)]
        with tf.control_dependencies([u for u in updates if u is not None]):
            counted = self.counter.assign_add(1, read_value=False)
        with tf.control_dependencies([counted] if counted is not None else []):
            count = self.counter.read_value()

        def reduce_and_clear():
            values = averaged_over_passes([acc.read_value() for acc in sums], n,
                                          self.average_aggregated_gradients)
            reduced = self._settings.reduce(values, [variables[i] for i in present])
            with tf.control_dependencies(reduced):
                clears = [acc.assign(tf.zeros_like(acc), read_value=False) for acc in sums]
                clears.append(self.counter.assign(0, read_value=False))
            with tf.control_dependencies([c for c in clears if c is not None]):
                return [tf.identity(r) for r in reduced]

        def local_sums():
            return [acc.read_value() for acc in sums]

        return gradients_of_pass(count, n, present, len(grads), reduce_and_clear, local_sums)

    def apply_gradients(self, apply_closure, optimizer, grads):
        import tensorflow as tf
        deps = [g for g in grads if g is not None]
        with tf.control_dependencies(deps):
            ready = tf.equal(self.counter.read_value(), 0)

        def apply():
            op = apply_closure()
            with tf.control_dependencies([op] if op is not None else []):
                return tf.constant(True)

        def skip():
            optimizer.iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(ready, apply, skip)


class TfKerasDistributedMixin(_DistributedMixin):
    """Placed before the user's tf-keras 2 optimizer class (current or legacy).

    Gradients are reduced once per step: by ``_compute_gradients`` / ``compute_gradients``
    (``minimize``, and so ``model.fit``, call one of them), ``_allreduce(grads, vars)`` or
    ``get_gradients`` (TF1 graph mode), as in Horovod, whose ``apply_gradients`` applies what it
    is given. An optimizer none of these has been called on reduces in ``apply_gradients``
    instead (a custom loop that computes the gradients with its own tape). Once one of them has
    been called, ``apply_gradients`` applies as given from then on: a flag, not a per-call
    hand-over, because ``tf.function`` may trace a step twice (the first trace creates the
    slot variables) and a one-shot hand-over would be consumed by the first trace.
    """

    def _hvd_new_accumulator(self, var):
        import tensorflow as tf
        with tf.init_scope():
            return tf.Variable(tf.zeros(var.shape, dtype=var.dtype), trainable=False,
                               name='hvd_accumulator')

    def _allreduce(self, grads, vars):
        """Reduces one pass's gradients (with local aggregation: adds them to the local sums,
        reducing on every n-th pass); the next ``apply_gradients`` then does not reduce."""
        grads, vars = list(grads), list(vars)
        helper = self._agg_helper
        if helper is not None:
            reduced = helper.compute_gradients(grads, vars)
        else:
            reduced = self._hvd.reduce(grads, vars)
        self._hvd_reduced_before_apply = True
        return reduced

    def _hvd_gradients(self, loss, var_list, grad_loss, tape):
        import tensorflow as tf
        if not callable(loss) and tape is None:
            raise ValueError('`tape` is required when a `Tensor` loss is passed. '
                             'Received: loss={}, tape={}.'.format(loss, tape))
        tape = tape if tape is not None else tf.GradientTape()
        if callable(loss):
            with tape:
                if not callable(var_list):
                    tape.watch(var_list)
                loss = loss()
                if callable(var_list):
                    var_list = var_list()
        var_list = tf.nest.flatten(var_list)
        grads = tape.gradient(loss, var_list, grad_loss)
        return list(zip(grads, var_list))

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """``(gradient, variable)`` pairs of ``loss``, allreduced across the process set (with
        ``backward_passes_per_step`` > 1: see ``_agg_helper``)."""
        base = getattr(super(), '_compute_gradients', None)
        if base is not None:
            pairs = base(loss, var_list, grad_loss=grad_loss, tape=tape)
        else:
            pairs = self._hvd_gradients(loss, var_list, grad_loss, tape)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(self._allreduce(grads, variables), variables))

    def get_gradients(self, loss, params):
        """TF1 graph mode (legacy optimizers): the allreduced gradients of ``loss``."""
        grads = super().get_gradients(loss, params)
        return self._allreduce(grads, params)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        pairs = list(grads_and_vars)
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        if getattr(self, '_hvd_reduced_before_apply', False):
            reduced = grads
        else:
            reduced = self._allreduce(grads, variables)
            self._hvd_reduced_before_apply = False
        helper = self._agg_helper
        if helper is None:
            return super().apply_gradients(zip(reduced, variables), *args, **kwargs)
        return helper.apply_gradients(
            lambda: super(TfKerasDistributedMixin, self).apply_gradients(
                zip(reduced, variables), *args, **kwargs), self, reduced)


class TfKerasComputeGradientsMixin:
    """For tf-keras optimizers that have a public ``compute_gradients`` (the current ones, not
    ``legacy``): ``minimize`` calls it, so it returns allreduced gradients."""

    def compute_gradients(self, loss, var_list, tape=None):
        pairs = super().compute_gradients(loss, var_list, tape=tape)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(self._allreduce(grads, variables), variables))


def _distributed_class(base, mixin):
    """The dynamic subclass of ``base``: same name, module and qualified name, so Keras
    serializes it as ``base`` (and a saved model loads without Horovod)."""
    key = (base, mixin)
    if key not in _class_cache:
        mixins = (mixin,)
        if mixin is TfKerasDistributedMixin and hasattr(base, 'compute_gradients'):
            mixins = (TfKerasComputeGradientsMixin, mixin)
        _class_cache[key] = type(base.__name__, mixins + (base,),
                                 {'__module__': base.__module__,
                                  '__qualname__': base.__qualname__})
    return _class_cache[key]


def create_distributed_optimizer(backend, optimizer, name=None, compression=None,
                                 sparse_as_dense=False, gradient_predivide_factor=1.0, op=None,
                                 backward_passes_per_step=1, average_aggregated_gradients=False,
                                 num_groups=0, groups=None, process_set=None,
                                 scale_local_gradients=True, device_dense='', device_sparse=''):
    """Builds the distributed optimizer; ``backend`` is the Keras it runs on."""
    if isinstance(compression, ErrorFeedbackCompressor):
        raise ValueError('{!r} is not supported with Keras optimizers in this build: reduce '
                         'with hvd.DistributedGradientTape(tape, compression=...) and apply '
                         'with the plain Keras optimizer'.format(compression))
    settings = ReduceSettings(backend, compression, sparse_as_dense, gradient_predivide_factor,
                              op, backward_passes_per_step, average_aggregated_gradients,
                              num_groups, groups, process_set, scale_local_gradients,
                              device_dense=device_dense, device_sparse=device_sparse)
    base = type(optimizer)
    if issubclass(base, _DistributedMixin):  # wrapping twice: rebuild from the user's class
        base = next(c for c in base.__mro__ if not issubclass(c, _DistributedMixin))
    mixin = Keras3DistributedMixin if backend.is_keras3 else TfKerasDistributedMixin
    config = optimizer.get_config()
    if name is not None:
        config['name'] = name
    cls = _distributed_class(base, mixin)
    new = cls.from_config(config)
    new._hvd = settings
    if not backend.is_keras3:
        new._agg_helper = (_TfKerasAggregationHelper(settings, new)
                           if backward_passes_per_step > 1 else None)
    return new
