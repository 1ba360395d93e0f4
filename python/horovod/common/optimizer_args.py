"""The argument checks every ``DistributedOptimizer`` shares (torch, TensorFlow, Keras), and
``DistributedGradientTape`` with them: one wording of each error, whichever framework raised it.
"""

import warnings

from horovod.common import basics
from horovod.common.ops import Average


def check_optimizer_args(op, gradient_predivide_factor, num_groups, groups,
                         backward_passes_per_step=1):
    """Raises ValueError for an invalid combination; returns the effective ``groups``
    (``num_groups`` is deprecated, with a DeprecationWarning, and used when ``groups`` is
    None)."""
    if gradient_predivide_factor != 1.0:
        if basics.rocm_built():
            raise ValueError('gradient_predivide_factor not supported yet with ROCm')
        if op != Average:
            raise ValueError('gradient_predivide_factor not supported with op != Average')
    if backward_passes_per_step is None or backward_passes_per_step <= 0:
        raise ValueError('backward_passes_per_step must be > 0')
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` and will be removed '
                      'in a future release.', DeprecationWarning)
        if groups is None:
            groups = num_groups
    return groups


def check_variable_groups(groups, is_variable, key=id):
    """Checks ``groups`` given as None, a positive int, or lists of variables in which no
    variable (told apart by ``key(variable)``) appears twice; ``is_variable(obj)`` says what
    counts as a variable."""
    if groups is None:
        return
    if isinstance(groups, int):
        if groups <= 0:
            raise ValueError('groups must be a positive int or a list of lists of variables, '
                             'got {}'.format(groups))
        return
    if not isinstance(groups, (list, tuple)):
        raise ValueError('groups must be a positive int or a list of lists of variables, got '
                         '{!r}'.format(type(groups).__name__))
    seen = set()
    for group in groups:
        for var in group:
            if not is_variable(var):
                raise ValueError('groups must contain only variables, got {!r}'
                                 .format(type(var).__name__))
            if key(var) in seen:
                raise ValueError('A variable can only appear in one group: {}'
                                 .format(getattr(var, 'name', var)))
            seen.add(key(var))
