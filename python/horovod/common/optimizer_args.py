"""The argument checks every ``DistributedOptimizer`` shares (torch, TensorFlow, Keras), and
``DistributedGradientTape`` with them: one wording of each error, whichever framework raised it.
Groups of variables are checked by ``horovod.common.gradient_groups``.
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

