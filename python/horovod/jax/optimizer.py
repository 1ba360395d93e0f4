"""Gradient averaging for JAX: ``allreduce_gradients`` on any pytree of gradients, and
``DistributedOptimizer``, which wraps an optax-style gradient transformation (any object with
``init(params)`` and ``update(updates, state, params=None)``) so that the gradients are
allreduced, as one grouped (fused) collective, before the wrapped transformation sees them.
optax itself is not required; when it is installed the wrapper is a real
``optax.GradientTransformation``. Both work eagerly and inside ``jax.jit``.
"""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from horovod.common.process_sets import global_process_set
from horovod.jax import mpi_ops
from horovod.jax.compression import Compression
from horovod.jax.mpi_ops import Adasum, Average, Sum


class GradientTransformation(NamedTuple):
    """optax's protocol (``init``, ``update``), for when optax is not installed."""
    init: Callable
    update: Callable


class DistributedOptimizerState(NamedTuple):
    """The wrapped transformation's state, plus the gradients accumulated since the last
    allreduce and how many passes they hold (backward_passes_per_step > 1)."""
    inner_state: Any
    accumulated: Any
    passes: Any


def allreduce_gradients(grads, op=Average, compression=Compression.none,
                        gradient_predivide_factor=1.0, process_set=global_process_set,
                        name=None):
    """Returns the pytree ``grads`` allreduced over ``process_set`` in one grouped allreduce
    (``None`` leaves stay None). With Average, ``gradient_predivide_factor`` f splits the
    division: gradients are scaled by 1/f before the sum and by f/size after it."""
    if op not in (Average, Sum, Adasum):
        raise ValueError('horovod.jax: gradients are reduced with Average, Sum or Adasum, '
                         'got op {}.'.format(op))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    leaves, treedef = jax.tree_util.tree_flatten(grads)
    if not leaves:
        return grads
    pre, post = 1.0, 1.0
    if op == Average and gradient_predivide_factor != 1.0:
        pre = 1.0 / gradient_predivide_factor
        post = gradient_predivide_factor
    reduced = mpi_ops.grouped_allreduce(leaves, op=op, prescale_factor=pre,
                                        postscale_factor=post, process_set=process_set,
                                        compression=compression,
                                        name=name)
    return jax.tree_util.tree_unflatten(treedef, reduced)


def _gradient_transformation(init, update):
    try:
        import optax
    except ImportError:
        return GradientTransformation(init, update)
    return optax.GradientTransformation(init, update)


def DistributedOptimizer(optimizer, op=Average, compression=Compression.none,
                         backward_passes_per_step=1, gradient_predivide_factor=1.0,
                         process_set=global_process_set, name=None):
    """Wraps ``optimizer`` (optax-style) so that its ``update`` receives gradients allreduced
    over ``process_set``. With ``backward_passes_per_step`` k > 1 the gradients of k calls are
    averaged locally and allreduced on every k-th call; the other calls return zero updates and
    leave the wrapped state untouched (like optax.MultiSteps)."""
    if backward_passes_per_step < 1:
        raise ValueError('backward_passes_per_step must be >= 1, got {}'.format(
            backward_passes_per_step))
    k = int(backward_passes_per_step)

    def reduce(grads):
        return allreduce_gradients(grads, op=op, compression=compression,
                                   gradient_predivide_factor=gradient_predivide_factor,
                                   process_set=process_set, name=name)

    def init(params):
        inner = optimizer.init(params)
        if k == 1:
            return DistributedOptimizerState(inner, None, None)
        return DistributedOptimizerState(inner, jax.tree_util.tree_map(jnp.zeros_like, params),
                                         jnp.zeros((), jnp.int32))

    def update(grads, state, params=None):
        if k == 1:
            updates, inner = optimizer.update(reduce(grads), state.inner_state, params)
            return updates, DistributedOptimizerState(inner, None, None)
        acc = jax.tree_util.tree_map(jnp.add, state.accumulated, grads)
        passes = state.passes + 1

        def sync(operand):
            acc, inner = operand
            mean = jax.tree_util.tree_map(lambda a: a / k, acc)
            updates, inner = optimizer.update(reduce(mean), inner, params)
            return updates, inner, jax.tree_util.tree_map(jnp.zeros_like, acc), jnp.zeros(
                (), jnp.int32)

        def skip(operand):
            acc, inner = operand
            return jax.tree_util.tree_map(jnp.zeros_like, acc), inner, acc, passes

        if isinstance(passes, jax.core.Tracer):
            updates, inner, acc, passes = jax.lax.cond(passes == k, sync, skip,
                                                       (acc, state.inner_state))
        else:
            branch = sync if int(passes) == k else skip
            updates, inner, acc, passes = branch((acc, state.inner_state))
        return updates, DistributedOptimizerState(inner, acc, passes)

    return _gradient_transformation(init, update)
